"""Mutation testing of the store, rule, profiler, report, MLflow and hook modules: do the tests notice a change.

A small self-contained AST mutator (no mutmut configuration needed). Each mutant changes one thing in one module:
``<``↔``<=``, ``>``↔``>=``, ``==``↔``!=``, ``is``↔``is not``, ``in``↔``not in``, ``and``↔``or``, ``+``↔``-``,
``*``→``/``, a number constant tweaked (``n`` → ``n + 1``, ``0.5`` → ``1.5``), ``True``↔``False``,
``return x`` → ``return None``, a call statement removed, a ``not`` dropped. The mutant is written into a private copy
of the package (``PYTHONPATH`` points the test run at it; the working tree is never touched), then the test files that
the ``TESTS`` table maps to that module, and the examples in its docstrings, run with ``-x`` under a per-mutant
timeout, from a folder that holds the copy and links to the rest of the repository (the processes a test starts run
the mutant too). A mutant is *killed* when the tests fail (or time out), *survived* when they pass. ``--sample N``
draws N mutants per module (seeded), so a run fits in the time there is.

    PYTHONPATH=$PWD .venv/bin/python scripts/mutation.py --sample 12 --seed 1
    .venv/bin/python scripts/mutation.py --modules store/framing.py --list     # the mutants, without running them
    PYTHONPATH=$PWD .venv/bin/python scripts/mutation.py --sample 12 --seed 1 --rerun before.log  # survivors only

``--rerun LOG`` runs only the mutants that survived in an earlier run's output (same ``--modules``, ``--sample`` and
``--seed``): after tests were added, the mutants killed before are killed still (the test lists only grow), so the
survivors are what is left to measure.

Prints one line per mutant, the kill rate per module and in total, and the survivors (file:line, what changed).
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "trainspect"

# module (relative to trainspect/) -> the test files that exercise it
_STORE = [
    "tests/store/test_store_edges.py",
    "tests/store/test_index_recovery.py",
    "tests/store/test_tensor_file_roundtrip.py",
    "tests/store/test_framing.py",
    "tests/store/test_crash_and_corruption.py",
    "tests/store/test_trial_api.py",
    "tests/store/test_store_hand_mutants.py",
    "tests/store/test_smdebug_fixtures.py",  # runs the real smdebug wrote: the index's direct entries
    "-knot sigkill",
]
_WRITER = [
    "tests/store/test_writer_bounds.py",
    "tests/store/test_run_writer_tensorboard.py",
    "tests/store/test_background_writer.py",
    "tests/store/test_backlog.py",
    "tests/hooks/test_gc_footprint.py",  # a queued loss-only step stays a flat tuple of atoms
    *_STORE,
]
_PROFILER_RULES = [
    "tests/profiler/test_profiler_rule_bounds.py",
    "tests/profiler/test_profiler_rule_thresholds.py",
    "tests/profiler/test_profiler_rule_edges.py",
    "tests/profiler/test_profiler_rules.py",
    "tests/profiler/test_profiler_hand_mutants.py",
]
_ANALYSES = [
    "tests/profiler/test_event_edges.py",
    "tests/profiler/test_analysis_figures.py",
    "tests/profiler/test_utilisation_figures.py",
    "tests/profiler/test_profiler_readers.py",
    "tests/profiler/test_linear_costs.py",
    "tests/profiler/test_cuda_memory.py",
    "tests/profiler/test_python_hotspots_own_frames.py",
    "tests/profiler/test_profiler_hand_mutants.py",
    "tests/report/test_report_histograms.py",
    "tests/report/test_report_truth.py",
]
_READERS = [
    *_ANALYSES,
    "tests/profiler/test_sagemaker_output.py",
    "tests/profiler/test_profiler_storage.py",
    "tests/profiler/test_time_units_and_windows.py",
]
_REPORT = [
    "tests/report/test_report_edges.py",
    "tests/report/test_report_figures.py",
    "tests/report/test_summary_figures.py",
    "tests/report/test_report_truth.py",
    "tests/report/test_report_histograms.py",
    "tests/report/test_report_rules_agree.py",
    "tests/report/test_report_html.py",
    "tests/report/test_report_hand_mutants.py",
    "-mnot browser",
]
_COMPARE = [
    "tests/report/test_report_edges.py",
    "tests/report/test_compare_rows.py",
    "tests/report/test_summary_figures.py",
    "tests/report/test_compare.py",
    "tests/report/test_compare_trust.py",
    "tests/report/test_report_hand_mutants.py",
    "-mnot browser",
]
_MLFLOW = [
    "tests/mlflow/test_logger_edges.py",
    "tests/mlflow/test_mlflow_values.py",
    "tests/tb_plugin/test_metric_catalogue.py",
    "tests/mlflow/test_mlflow_local.py",
    "tests/store/test_store_hand_mutants.py",
    "tests/report/test_report_hand_mutants.py",
]
_TENSOR_RULES = [
    "tests/rules/test_rule_edges.py",
    "tests/rules/test_rule_thresholds.py",
    "tests/rules/test_rule_defaults.py",
    "tests/rules/test_rules_tensor.py",
    "tests/rules/test_rules_parameters.py",
    "tests/rules/test_rules_fast_paths.py",
    "tests/rules/test_rules_trust.py",
    "tests/rules/test_columns.py",
    "tests/rules/test_rule_hand_mutants.py",
]
_LOSS_RULES = [*_TENSOR_RULES, "tests/rules/test_interleaved_losses.py", "tests/rules/test_eval_rules_trust.py"]
# module (relative to trainspect/) -> the pytest arguments (test files, options) of the tests that exercise it
_LIFECYCLE = [
    "tests/hooks/test_lifecycle_edges.py",
    "tests/hooks/test_collector_lifecycle.py",
    "tests/hooks/test_step_driver.py",
    "tests/hooks/test_step_api.py",
    "tests/hooks/test_backward_loss_steps.py",
    "tests/hooks/test_torch_capture.py",
    "tests/hooks/test_lifecycle_hand_mutants.py",
    "tests/hooks/test_step_path.py",
]
_HOOK_CORE = [
    *_LIFECYCLE,
    "tests/hooks/test_loss_modules.py",
    "tests/hooks/test_nan_origin.py",
    "tests/hooks/test_pickle_safe.py",
    "tests/hooks/test_real_code_captures.py",
    "tests/hooks/test_json_config.py",
    "tests/hooks/test_device_capture.py",
    "tests/hooks/test_save_config.py",
    "tests/test_config_validation.py",
    "tests/rules/test_rules_live.py",
    "tests/profiler/test_profiler_torch.py",
    "tests/profiler/test_input_bottleneck.py",
    "tests/frameworks/test_hf_trainer.py",
]
TESTS: dict[str, list[str]] = {
    "store/framing.py": [
        "tests/store/test_framing.py",
        "tests/store/test_store_hand_mutants.py",
        "tests/store/test_tensor_file_roundtrip.py",
        "tests/store/test_crash_and_corruption.py",
        "tests/profiler/test_profiler_storage.py",
        "-knot sigkill",
    ],
    "store/index.py": _STORE,
    "store/tensor_file.py": _STORE,
    "rules/profiler/low_gpu_utilization.py": _PROFILER_RULES,
    "rules/profiler/_bottleneck.py": _PROFILER_RULES,
    "rules/profiler/cpu_bottleneck.py": [*_PROFILER_RULES, "tests/profiler/test_job_cpu_rules.py"],
    "rules/profiler/io_bottleneck.py": _PROFILER_RULES,
    "rules/vanishing_gradient.py": [
        "tests/rules/test_rule_edges.py",
        "tests/rules/test_rule_thresholds.py",
        "tests/rules/test_rule_defaults.py",
        "tests/rules/test_vanishing_gradient_edges.py",
        "tests/rules/test_rules_tensor.py",
    ],
    "hooks/save_plan.py": [
        "tests/hooks/test_save_plan_rules.py",
        "tests/hooks/test_save_config.py",
        "tests/hooks/test_lifecycle_edges.py",
        "tests/hooks/test_lifecycle_hand_mutants.py",
    ],
    # the step lifecycle: which call ends which mode's step, accumulation, driven vs inferred, a stop, close
    "hooks/step_driver.py": _LIFECYCLE,
    "hooks/step_state.py": _LIFECYCLE,
    "hooks/collector.py": [
        *_LIFECYCLE,
        "tests/hooks/test_save_config.py",
        "tests/store/test_backlog.py",
        "tests/hooks/test_tensorboard_export.py",
    ],
    # added for issue 33: profiler analyses, report, MLflow, more rules and store modules
    "store/background.py": _WRITER,
    "store/run_writer.py": _WRITER,
    "store/gaps.py": [*_WRITER, "tests/rules/test_rules_tensor.py"],
    "store/quick_scan.py": ["tests/rules/test_columnar_parse.py", "tests/rules/test_columnar_read.py", *_STORE],
    "profiler/analysis.py": _ANALYSES,
    "profiler/histograms.py": [*_ANALYSES, "tests/tb_plugin/test_metric_catalogue.py"],
    "profiler/heatmap.py": _ANALYSES,
    "profiler/ranks.py": [*_ANALYSES, "tests/profiler/test_profiler_straggler.py"],
    "profiler/system_window.py": [
        "tests/profiler/test_time_units_and_windows.py",
        *_ANALYSES,
        "tests/profiler/test_profiler_storage.py",
    ],
    "profiler/events.py": [
        "tests/profiler/test_time_units_and_windows.py",
        *_ANALYSES,
        "tests/profiler/test_sagemaker_output.py",
    ],
    "profiler/traces.py": [
        "tests/profiler/test_time_units_and_windows.py",
        *_ANALYSES,
        "tests/profiler/test_sagemaker_output.py",
    ],
    "report/summary.py": _REPORT,
    "report/charts.py": _REPORT,
    "report/sections.py": _REPORT,
    "report/_framework_sections.py": _REPORT,
    "report/_system_sections.py": _REPORT,
    "report/_compare_rows.py": _COMPARE,
    "report/compare.py": [*_COMPARE, "tests/mlflow/test_mlflow_compare.py"],  # runs compared by MLflow run id
    "mlflow_plugin/keys.py": _MLFLOW,
    "mlflow_plugin/logger.py": _MLFLOW,
    "mlflow_plugin/session.py": _MLFLOW,
    "rules/profiler/_common.py": _PROFILER_RULES,
    "rules/profiler/_prefix_outliers.py": [*_PROFILER_RULES, "tests/profiler/test_step_outlier_robust.py"],
    "rules/profiler/batch_size.py": [*_PROFILER_RULES, "tests/profiler/test_job_cpu_rules.py"],
    "rules/profiler/dataloader.py": [*_PROFILER_RULES, "tests/profiler/test_linear_costs.py"],
    "rules/profiler/gpu_memory_increase.py": [*_PROFILER_RULES, "tests/profiler/test_cuda_memory.py"],
    "rules/profiler/input_bottleneck.py": [*_PROFILER_RULES, "tests/profiler/test_input_bottleneck.py"],
    "rules/profiler/load_balancing.py": [*_PROFILER_RULES, "tests/profiler/test_linear_costs.py"],
    "rules/profiler/max_initialization_time.py": _PROFILER_RULES,
    "rules/profiler/overall_framework_metrics.py": _PROFILER_RULES,
    "rules/profiler/overall_system_usage.py": [*_PROFILER_RULES, "tests/profiler/test_job_cpu_rules.py"],
    "rules/profiler/step_outlier.py": [*_PROFILER_RULES, "tests/profiler/test_step_outlier_robust.py"],
    "rules/profiler/worker_straggler.py": [*_PROFILER_RULES, "tests/profiler/test_profiler_straggler.py"],
    "rules/_common.py": ["tests/rules/test_loss_window_figures.py", *_TENSOR_RULES],
    "rules/all_zero.py": _TENSOR_RULES,
    "rules/check_input_images.py": _TENSOR_RULES,
    "rules/class_imbalance.py": _TENSOR_RULES,
    "rules/confusion.py": _TENSOR_RULES,
    "rules/dead_relu.py": [*_TENSOR_RULES, "tests/rules/test_dead_gradients.py"],
    "rules/_dead_gradients.py": [*_TENSOR_RULES, "tests/rules/test_dead_gradients.py"],
    "rules/exploding_tensor.py": _TENSOR_RULES,
    "rules/loss_not_decreasing.py": _LOSS_RULES,
    "rules/loss_windows.py": ["tests/rules/test_loss_window_figures.py", *_LOSS_RULES],
    "rules/nlp_sequence_ratio.py": _TENSOR_RULES,
    "rules/overfit.py": _LOSS_RULES,
    "rules/overtraining.py": _LOSS_RULES,
    "rules/poor_weight_initialization.py": _TENSOR_RULES,
    "rules/saturated_activation.py": _TENSOR_RULES,
    "rules/similar_across_runs.py": _TENSOR_RULES,
    "rules/stalled_training_rule.py": _TENSOR_RULES,
    "rules/tensor_variance.py": _TENSOR_RULES,
    "rules/unchanged_tensor.py": _TENSOR_RULES,
    "rules/weight_update_ratio.py": [*_TENSOR_RULES, "tests/rules/test_dead_gradients.py"],
    "store/source.py": ["tests/store/test_index_tailing.py", "tests/store/test_shards.py", *_STORE],
    "rules/counts.py": [
        "tests/rules/test_rule_edges.py",
        "tests/rules/test_rule_counts_line.py",
        "tests/mlflow/test_mlflow_values.py",
        "tests/report/test_report_truth.py",
        "tests/rules/test_verdict_record.py",
    ],
    # the hook core around the step driver (added after seed 43's first sample: appended, so earlier seeds draw
    # what they drew)
    "hooks/torch_hook.py": _HOOK_CORE,
    "hooks/torch_step_parts.py": [*_HOOK_CORE, "tests/hooks/test_sharded_params.py"],
    "hooks/hook_api.py": [
        *_HOOK_CORE,
        "tests/keras/test_keras_faults.py::test_json_config",
        "tests/test_distributed.py::test_ranks_killed_right_after_destroying_their_process_group_end_the_run",
        "tests/distributed/test_launchers.py::test_lightning_ddp_records_every_rank[ddp_fork-before-trainer]",
    ],
    "hooks/hook_extras.py": [
        *_HOOK_CORE,
        "tests/mlflow/test_mlflow_local.py",
        "tests/mlflow/test_mlflow_distributed.py",
        "tests/test_distributed.py::test_the_chief_reports_on_the_whole_job_once_the_other_ranks_ended",
    ],
    # the profiler's readers, units and samplers (added with the hook core)
    "profiler/readers.py": _READERS,
    "profiler/_sm_framework.py": _READERS,
    "profiler/arrays.py": _READERS,
    "profiler/metrics.py": [
        *_ANALYSES,
        "tests/tb_plugin/test_metric_catalogue.py",
        "tests/profiler/test_gpu_nvml.py",
        "tests/profiler/test_profiler_monitor.py",
    ],
    "hooks/system_monitor.py": [
        "tests/profiler/test_profiler_monitor.py",
        "tests/profiler/test_gpu_nvml.py",
        "tests/profiler/test_process_cpu.py",
        "tests/profiler/test_profiler_hand_mutants.py",
    ],
    "hooks/framework_metrics.py": [
        "tests/profiler/test_profiler_torch.py",
        "tests/profiler/test_sync_timer.py",
        "tests/profiler/test_profiler_frames.py",
        "tests/profiler/test_time_units_and_windows.py",
        "tests/profiler/test_profiler_hand_mutants.py",
    ],
    # the per-step path's guard and the registered models (nesting on the call stack), added 2026-12-04
    "hooks/_guard.py": [
        "tests/hooks/test_step_path.py",
        "tests/hooks/test_signal_inside_hook.py",
        "tests/hooks/test_lifecycle_hand_mutants.py",
        "tests/mlflow/test_logger_edges.py",
    ],
    "hooks/torch_models.py": [*_HOOK_CORE, "tests/hooks/test_sharded_params.py"],
    # the registered model's forward tap (added 2026-12-04, fifth session's follow-up)
    "hooks/torch_callbacks.py": [
        "tests/hooks/test_forward_tap.py",
        "tests/hooks/test_pickle_safe.py",
        "tests/hooks/test_step_path.py",
        "tests/hooks/test_loss_modules.py",
        "tests/distributed/test_launchers.py::test_lightning_ddp_records_every_rank[ddp_spawn-before-trainer]",
    ],
    # the loss tap: backward passes, functional losses, registered loss modules' forwards (2026-12-05)
    "hooks/torch_backward.py": [
        "tests/hooks/test_loss_modules.py",
        "tests/hooks/test_backward_loss_steps.py",
        "tests/hooks/test_step_path.py",
        "tests/hooks/test_real_code_captures.py",
        "tests/hooks/test_pickle_safe.py",
        "tests/test_zcc.py",
    ],
}
DEFAULT_MODULES = list(TESTS)

_SWAPS: dict[type[Any], type[Any]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.And: ast.Or,
    ast.Or: ast.And,
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
}
_SYMBOL: dict[type[Any], str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.And: "and",
    ast.Or: "or",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
}
_QUIET_CALLS = {"debug"}  # removing a debug log line changes nothing a test can see


@dataclass(frozen=True)
class Mutant:
    """One change: the ``index``-th mutable node of ``module`` (in walk order), at ``line``."""

    module: str
    index: int
    line: int
    what: str


def _mutable_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Nodes a mutation applies to, in a deterministic order; annotations and docstrings are skipped."""
    for node in _walk(tree):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in _SWAPS:
            yield node
        elif isinstance(node, ast.BoolOp) or (isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _SWAPS):
            yield node
        elif isinstance(node, ast.Constant) and isinstance(node.value, (bool, int, float)):
            yield node
        elif isinstance(node, ast.Return) and node.value is not None and not _is_none(node.value):
            yield node
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and not _quiet(node.value):
            yield node
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield node


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    for name, value in ast.iter_fields(node):
        if name in ("annotation", "returns", "type_comment", "decorator_list"):
            continue
        children = value if isinstance(value, list) else [value]
        for i, child in enumerate(children):
            if not isinstance(child, ast.AST):
                continue
            if name == "body" and i == 0 and _is_docstring(child):
                continue
            if isinstance(child, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in child.targets):
                continue
            yield child
            yield from _walk(child)


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def _quiet(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Attribute) and call.func.attr in _QUIET_CALLS


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Compare):
        op = type(node.ops[0])
        return f"{_SYMBOL[op]} -> {_SYMBOL[_SWAPS[op]]}"
    if isinstance(node, ast.BoolOp):
        return f"{_SYMBOL[type(node.op)]} -> {_SYMBOL[_SWAPS[type(node.op)]]}"
    if isinstance(node, (ast.BinOp, ast.AugAssign)):
        return f"{_SYMBOL[type(node.op)]} -> {_SYMBOL[_SWAPS[type(node.op)]]}"
    if isinstance(node, ast.Constant):
        return f"constant {node.value!r} -> {_tweak(node.value)!r}"
    if isinstance(node, ast.Return):
        return f"return {ast.unparse(node.value)[:40]} -> return None"  # type: ignore[arg-type]
    if isinstance(node, ast.Expr):
        return f"call removed: {ast.unparse(node)[:50]}"
    return f"not dropped: {ast.unparse(node)[:50]}"


def _tweak(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    return value + 1.0 if value != 0 else 1.0


class _Apply(ast.NodeTransformer):
    """Mutates the node at ``target`` (an index into :func:`_mutable_nodes`)."""

    def __init__(self, target: ast.AST) -> None:
        self.target = target

    def visit(self, node: ast.AST) -> ast.AST:
        if node is not self.target:
            return super().visit(node)
        if isinstance(node, ast.Compare):
            node.ops[0] = _SWAPS[type(node.ops[0])]()
        elif isinstance(node, (ast.BoolOp, ast.BinOp, ast.AugAssign)):
            node.op = _SWAPS[type(node.op)]()
        elif isinstance(node, ast.Constant):
            node.value = _tweak(node.value)
        elif isinstance(node, ast.Return):
            node.value = ast.Constant(None)
        elif isinstance(node, ast.Expr):
            return ast.Pass()
        elif isinstance(node, ast.UnaryOp):
            return node.operand
        return node


def mutants(module: str) -> list[Mutant]:
    """Every mutant of ``module`` (relative to the package)."""
    tree = ast.parse((PACKAGE / module).read_text())
    return [Mutant(module, i, getattr(n, "lineno", 0), _describe(n)) for i, n in enumerate(_mutable_nodes(tree))]


def mutated_source(m: Mutant) -> str:
    """The source of ``m.module`` with mutant ``m`` applied."""
    tree = ast.parse((PACKAGE / m.module).read_text())
    target = list(_mutable_nodes(tree))[m.index]
    mutated = _Apply(target).visit(tree)
    return ast.unparse(ast.fix_missing_locations(mutated))


def _doctests(*modules: str) -> list[str]:
    """The pytest arguments that run the examples in ``modules``' docstrings too, as the suite does (in the copy)."""
    return ["--doctest-modules", *(f"trainspect/{module}" for module in modules)]


def _run_tests(copy_root: Path, tests: list[str], timeout: float, show: bool = False) -> str:
    tests = [t for t in tests if t.startswith("-") or (ROOT / t.split("::")[0]).exists()]  # an older checkout
    env = {
        **os.environ,
        "PYTHONPATH": str(copy_root),
        "PYTHONDONTWRITEBYTECODE": "1",
        "TRAINSPECT_TESTING": "1",
        "OMP_NUM_THREADS": "1",
    }
    cmd = [sys.executable, "-P", "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests]
    try:
        proc = subprocess.run(cmd, cwd=copy_root, env=env, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return "timeout"
    if show and proc.returncode != 0:  # the failure itself, not the warnings summary after it
        out, err = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
        failures = out.find("= FAILURES =")
        print(
            out[max(failures - 80, 0) : failures + 6000] if failures >= 0 else out[-3000:], err[-2000:], file=sys.stderr
        )
    return "survived" if proc.returncode == 0 else ("killed" if proc.returncode == 1 else f"error{proc.returncode}")


def main() -> int:
    """Run (or list) the sampled mutants and print the kill rates."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--modules", nargs="*", default=DEFAULT_MODULES, help="modules under trainspect/ (TESTS keys)")
    ap.add_argument("--sample", type=int, default=0, help="mutants per module (0: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per mutant's test run")
    ap.add_argument("--only", nargs="*", default=None, help="run only these modules' mutants (the sample is unchanged)")
    ap.add_argument("--list", action="store_true", help="list the mutants only")
    ap.add_argument("--rerun", type=Path, default=None, help="run only the survivors of this earlier run's output")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    chosen: list[Mutant] = []
    for module in args.modules:
        every = mutants(module)
        picked = rng.sample(every, min(args.sample, len(every))) if args.sample else every
        chosen += sorted(picked, key=lambda m: m.index)
    if args.only is not None:
        chosen = [m for m in chosen if m.module in args.only]
        args.modules = [m for m in args.modules if m in args.only]
    if args.rerun is not None:
        survived = survivors_of(args.rerun.read_text())
        chosen = [m for m in chosen if f"{m.module}:{m.line}  {m.what}" in survived]
        args.modules = [m for m in args.modules if any(c.module == m for c in chosen)]
    if args.list:
        for m in chosen:
            print(f"{m.module}:{m.line}  {m.what}")
        return 0
    with tempfile.TemporaryDirectory(prefix="trainspect-mut-") as tmp:
        copy_root = Path(tmp)
        shutil.copytree(PACKAGE, copy_root / "trainspect", ignore=shutil.ignore_patterns("__pycache__"))
        _link_the_rest(copy_root)
        _check_imports_the_copy(copy_root)
        passed: set[tuple[str, ...]] = set()  # modules sharing a test list: their baseline runs once
        for module in args.modules:  # the unmutated copy must pass, or every mutant would count as killed
            if tuple(TESTS[module]) in passed:
                continue
            if _run_tests(copy_root, TESTS[module], args.timeout * 2, show=True) != "survived":
                print(f"baseline: the tests of {module} fail without any mutant; fix them first", file=sys.stderr)
                return 2
            passed.add(tuple(TESTS[module]))
        # pytest's exit code 5 ("error5": no tests ran) is a module set without docstring examples
        if _run_tests(copy_root, _doctests(*args.modules), args.timeout * 2, show=True) not in ("survived", "error5"):
            print("baseline: the modules' doctests fail without any mutant; fix them first", file=sys.stderr)
            return 2
        results = _run_all(chosen, copy_root, args.timeout)
    return _summary(results)


_PROGRESS = re.compile(r"^\[\d+/\d+\] survived\s+(\S+:\d+  .*)  \(\d+s\)$")
_SURVIVOR = re.compile(r"^  (\S+:\d+  .*)$")


def survivors_of(output: str) -> set[str]:
    r"""The ``module:line  what`` of each mutant an earlier run's output reports as survived.

    Example:
        >>> sorted(survivors_of("[1/2] survived store/gaps.py:65  - -> +  (16s)\n[2/2] killed   a.py:1  x  (1s)"))
        ['store/gaps.py:65  - -> +']
    """
    found = set()
    for line in output.splitlines():
        m = _PROGRESS.match(line) or _SURVIVOR.match(line)
        if m:
            found.add(m.group(1))
    return found


def _link_the_rest(copy_root: Path) -> None:
    """Beside the package copy, a link to every other entry of the repository: the tests run from ``copy_root``.

    A child process a test starts inherits that working directory, so ``python -m trainspect.cli`` or ``python -c``
    (whose ``sys.path`` begins with the working directory) runs the mutant too, not the repository's trainspect.
    """
    for entry in ROOT.iterdir():
        if entry.name != "trainspect":
            (copy_root / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())


def _check_imports_the_copy(copy_root: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(copy_root), "PYTHONDONTWRITEBYTECODE": "1"}
    for flags in (["-P"], []):  # pytest's own process, and a child that a test starts with ``-c`` or ``-m``
        where = subprocess.run(
            [sys.executable, *flags, "-c", "import trainspect; print(trainspect.__file__)"],
            cwd=copy_root,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not where.startswith(str(copy_root)):
            raise SystemExit(f"the tests would import {where}, not the mutated copy under {copy_root}")


def _run_all(chosen: list[Mutant], copy_root: Path, timeout: float) -> list[tuple[Mutant, str]]:
    results = []
    for n, m in enumerate(chosen, 1):
        target = copy_root / "trainspect" / m.module
        original = target.read_text()
        target.write_text(mutated_source(m))
        start = time.monotonic()
        try:
            outcome = _run_tests(copy_root, [*TESTS[m.module], *_doctests(m.module)], timeout)
        finally:
            target.write_text(original)
        results.append((m, outcome))
        print(
            f"[{n}/{len(chosen)}] {outcome:8s} {m.module}:{m.line}  {m.what}  ({time.monotonic() - start:.0f}s)",
            flush=True,
        )
    return results


def _summary(results: list[tuple[Mutant, str]]) -> int:
    print("\nmodule                                    killed/total  kill rate")
    for module in dict.fromkeys(m.module for m, _ in results):
        mine = [o for m, o in results if m.module == module]
        killed = sum(o != "survived" for o in mine)
        print(f"{module:42s} {killed:5d}/{len(mine):<5d}  {100.0 * killed / len(mine):6.1f} %")
    killed = sum(o != "survived" for _, o in results)
    total = len(results)
    print(f"{'TOTAL':42s} {killed:5d}/{total:<5d}  {100.0 * killed / max(total, 1):6.1f} %")
    survivors = [m for m, o in results if o == "survived"]
    if survivors:
        print("\nsurvivors:")
        for m in survivors:
            print(f"  {m.module}:{m.line}  {m.what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
