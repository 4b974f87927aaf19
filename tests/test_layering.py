"""The architecture's rules, checked on the source: env access in one place, frameworks only in hooks/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "trainspect"


def _sources() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if "static" not in p.parts)


def test_only_env_py_reads_the_environment() -> None:
    offenders = [
        str(p.relative_to(PKG))
        for p in _sources()
        if p.name != "env.py" and re.search(r"os\.environ|os\.getenv|getenv\(", p.read_text())
    ]
    assert offenders == []


def test_only_hooks_import_a_framework() -> None:
    pattern = re.compile(r"^\s*(import|from)\s+(torch|tensorflow|keras)\b", re.M)
    offenders = [
        str(p.relative_to(PKG))
        for p in _sources()
        if pattern.search(p.read_text()) and p.relative_to(PKG).parts[0] != "hooks"
    ]
    assert offenders == []


def test_importing_trainspect_loads_no_framework() -> None:
    import subprocess
    import sys

    code = (
        "import sys, trainspect, trainspect.rules, trainspect.store; "
        "print(sorted(m for m in ('torch', 'tensorflow') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


# --- dependencies between modules ------------------------------------------------------------------------------

LAYERS: tuple[tuple[str, ...], ...] = (
    ("shard",),
    ("modes", "env", "reductions", "_progress", "_pipes", "_version", "_json_safe", "_entry_points", "_units"),
    ("exceptions",),
    ("config",),
    ("collections", "step"),
    ("store",),
    ("profiler",),
    ("rules",),
    ("frames",),
    ("_closing_summary",),
    ("report", "tb_plugin"),
    ("notebook",),
    ("mlflow_plugin",),
    ("hook_settings",),
    ("hook_config",),
    ("hooks",),
    ("smdebug_compat",),
    ("torch", "keras", "lightning", "transformers", "mlflow_plugin.autologging"),
    ("<root>",),
    ("_supervise", "_bootstrap"),
    ("cli",),
)
"""The layers of trainspect, bottom first: a module imports only from its own part or from parts of lower layers.

A part is a top-level module or subpackage of trainspect (``<root>`` is ``trainspect/__init__.py``); a dotted entry
(``mlflow_plugin.autologging``) places one module apart from its package: an entry point that starts a hook.
"""


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.AST, module: str, is_package: bool, known: set[str]) -> list[str]:
    """The modules of ``known`` that one import statement names (``from a import b`` names ``a.b`` if a module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    out = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
    return [m for m in out if m in known]


def import_graph(root: Path) -> dict[str, set[str]]:
    """Map each module under ``root`` to the modules it imports anywhere: at the top, in functions, under
    ``TYPE_CHECKING``."""
    files = {_module_name(p, root): p for p in root.rglob("*.py") if "static" not in p.parts}
    known = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(), str(path))
        found = {m for node in ast.walk(tree) for m in _imported(node, module, path.name == "__init__.py", known)}
        graph[module] = found - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that depend on each other (strongly connected components of two or more), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def _layer(module: str, layers: tuple[tuple[str, ...], ...]) -> tuple[int, str]:
    """(layer number, part) of a module: the longest part of ``layers`` that names it or a package above it."""
    rel = module.split(".", 1)[1] if "." in module else "<root>"
    best: tuple[int, str] | None = None
    for number, parts in enumerate(layers):
        for part in parts:
            if (rel == part or rel.startswith(part + ".")) and (best is None or len(part) > len(best[1])):
                best = (number, part)
    if best is None:
        raise AssertionError(f"{module} is in no layer of LAYERS: add its part there")
    return best


def upward_imports(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...]) -> list[str]:
    """Imports from a part to another part of the same or a higher layer."""
    out = []
    for module, imports in sorted(graph.items()):
        low, part = _layer(module, layers)
        for target in sorted(imports):
            target_layer, target_part = _layer(target, layers)
            if target_part != part and target_layer >= low:
                out.append(f"{module} -> {target}")
    return out


def test_no_module_depends_on_itself_through_others() -> None:
    assert cycles(import_graph(PKG)) == []


def test_imports_point_down_the_layers() -> None:
    graph = import_graph(PKG)
    assert upward_imports(graph, LAYERS) == []
    used = {_layer(m, LAYERS)[1] for m in graph}
    assert {p for parts in LAYERS for p in parts} - used == set()  # no stale part in LAYERS


def test_the_checker_flags_a_synthetic_cycle_and_an_upward_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("from pkg.low import b\n")
    (pkg / "low" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.low.c import C\n"
    )
    (pkg / "low" / "c.py").write_text("def f():\n    from . import a\n    from pkg.high import h\n")
    (pkg / "high.py").write_text("X = 1\n")
    graph = import_graph(pkg)
    assert graph["pkg.low.a"] == {"pkg.low.b"} and graph["pkg.low.c"] == {"pkg.low.a", "pkg.high"}
    assert cycles(graph) == [["pkg.low.a", "pkg.low.b", "pkg.low.c"]]  # deferred and TYPE_CHECKING imports count
    assert upward_imports(graph, (("low",), ("high",), ("<root>",))) == ["pkg.low.c -> pkg.high"]
    (pkg / "low" / "c.py").write_text("X = 1\n")
    assert cycles(import_graph(pkg)) == []
