"""Collections: named groups of tensors with their own save and reduction settings (spec 5.4)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from trainspect.config import ReductionConfig, SaveConfig, SaveConfigMode, parse_bool
from trainspect.exceptions import ConfigError

__all__ = [
    "Collection",
    "CollectionManager",
    "BUILTIN_COLLECTIONS",
    "SCALAR_COLLECTIONS",
    "DEFAULT_COLLECTIONS",
    "ALWAYS_SAVED",
    "ACTIVATION_COLLECTIONS",
    "activation_tags",
]

# PyTorch regexes of smdebug (spec 5.4); `inputs`/`outputs` collect module inputs/outputs by module.
_BUILTIN_REGEX: dict[str, list[str]] = {
    "weights": [r"^(?!gradient).*weight"],
    "biases": [r"^(?!gradient).*bias"],
    "gradients": [r"^gradient"],
    "losses": [r"[Ll]oss_(?!input).*output"],
    "optimizer_variables": [r"^optimizer/"],
    "all": [],
    "default": [],
    "inputs": [],
    "outputs": [],
}
ACTIVATION_COLLECTIONS: dict[str, tuple[frozenset[str], bool]] = {
    "relu_input": (frozenset({"ReLU", "LeakyReLU"}), True),
    "relu_output": (frozenset({"ReLU", "LeakyReLU"}), False),
    "tanh_input": (frozenset({"Tanh"}), True),
    "sigmoid_input": (frozenset({"Sigmoid"}), True),
}
"""Collections of activation inputs/outputs, by module type: ``name -> (module types, inputs (else outputs))``.

Whenever a module of one of these types has its inputs (outputs) recorded, for whatever collection, the tensors
are also members of the matching collection, so rules such as DeadRelu find them (also under ``save_all``)."""
BUILTIN_COLLECTIONS = (*_BUILTIN_REGEX, *ACTIVATION_COLLECTIONS)
SCALAR_COLLECTIONS = frozenset({"losses", "metrics", "optimizer_variables", "sm_metrics", "scalars"})
DEFAULT_COLLECTIONS = ("losses",)
ALWAYS_SAVED = ("losses",)


@dataclass
class Collection:
    """A named set of tensors: by regex, by exact name, or by module (inputs/outputs).

    Args:
        name: the collection's name.
        include_regex: regexes matched (``re.search``) against tensor names.
        tensor_names: exact names.
        reduction_config: reductions saved for its tensors (``None``: the hook's).
        save_config: when its tensors are saved (``None``: the hook's).
        save_histogram: also write TensorBoard histograms of its tensors.
        module_types: class names of modules whose inputs/outputs belong to it (``"ReLU"``).
        module_names: module paths whose inputs/outputs belong to it.
        module_inputs: with module_types/module_names, their inputs belong to it.
        module_outputs: with module_types/module_names, their outputs belong to it.

    Example:
        >>> c = Collection("relu", include_regex=["relu.*_output"])
        >>> c.matches("relu1_output_0"), c.matches("fc1.weight")
        (True, False)
    """

    name: str
    include_regex: list[str] = field(default_factory=list)
    tensor_names: set[str] = field(default_factory=set)
    reduction_config: ReductionConfig | None = None
    save_config: SaveConfig | None = None
    save_histogram: bool = True
    module_types: set[str] = field(default_factory=set)
    module_names: set[str] = field(default_factory=set)
    module_inputs: bool = False
    module_outputs: bool = False
    _compiled: list[re.Pattern[str]] = field(default_factory=list, init=False, repr=False, compare=False)
    _module_ids: set[int] = field(default_factory=set, init=False, repr=False, compare=False)
    save_configs_changed: ClassVar[int] = 0
    """Counts assignments of ``save_config`` on any collection (save planners re-decide when it moves)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "save_config":
            Collection.save_configs_changed += 1
        object.__setattr__(self, name, value)

    def __post_init__(self) -> None:
        self.include_regex = list(self.include_regex)
        self.tensor_names = set(self.tensor_names)
        self._compile()

    def _compile(self) -> None:
        try:
            self._compiled = [re.compile(r) for r in self.include_regex]
        except re.error as exc:
            raise ConfigError(
                f"collection {self.name!r}: include_regex {exc.pattern!r} is not a regex: {exc}"
            ) from None

    def include(self, regex: str | Iterable[str]) -> None:
        """Add one regex or several."""
        self.include_regex.extend([regex] if isinstance(regex, str) else list(regex))
        self._compile()

    def add_tensor_name(self, name: str) -> None:
        """Add one exact tensor name."""
        self.tensor_names.add(name)

    def add_module_tensors(self, module: Any, inputs: bool = False, outputs: bool = True) -> None:
        """Add a module's inputs and/or outputs (PyTorch).

        The module is identified by its path once the hook registered it, and by the object itself before that,
        so this works before and after ``hook.register_module(model)``.
        """
        path = getattr(module, "_trainspect_name", None)
        if path:
            self.module_names.add(str(path))
        self._module_ids.add(id(module))
        self.module_inputs = self.module_inputs or inputs
        self.module_outputs = self.module_outputs or outputs

    def matches(self, name: str) -> bool:
        """Return whether a tensor name belongs to the collection by name or regex."""
        return name in self.tensor_names or any(p.search(name) for p in self._compiled)

    def wants_module(self, path: str, type_name: str, module: Any = None) -> tuple[bool, bool]:
        """Return ``(inputs, outputs)``: whether this module's inputs / outputs belong to the collection."""
        if (
            path in self.module_names
            or type_name in self.module_types
            or "*" in self.module_types
            or (module is not None and id(module) in self._module_ids)
        ):
            return self.module_inputs, self.module_outputs
        return False, False

    @property
    def is_scalar(self) -> bool:
        """Scalar collections get no reductions and no histograms."""
        return self.name in SCALAR_COLLECTIONS

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form stored in the run directory."""
        return {
            "name": self.name,
            "include_regex": list(self.include_regex),
            "tensor_names": sorted(self.tensor_names),
            "reduction_config": self.reduction_config.to_dict() if self.reduction_config else None,
            "save_config": self.save_config.to_dict() if self.save_config else None,
            "save_histogram": self.save_histogram,
            "module_types": sorted(self.module_types),
            "module_names": sorted(self.module_names),
            "module_inputs": self.module_inputs,
            "module_outputs": self.module_outputs,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Collection:
        """Rebuild from :meth:`to_dict`'s output."""
        rc = data.get("reduction_config")
        sc = data.get("save_config")
        return cls(
            name=str(data["name"]),
            include_regex=list(data.get("include_regex") or []),
            tensor_names=set(data.get("tensor_names") or []),
            reduction_config=ReductionConfig(**rc) if rc else None,
            save_config=SaveConfig(mode_save_configs={k: SaveConfigMode(**v) for k, v in sc.items()}) if sc else None,
            save_histogram=parse_bool("save_histogram", data.get("save_histogram", True)),
            module_types=set(data.get("module_types") or []),
            module_names=set(data.get("module_names") or []),
            module_inputs=bool(data.get("module_inputs", False)),
            module_outputs=bool(data.get("module_outputs", False)),
        )


class CollectionManager:
    """The collections of one hook, with the built-ins created on demand."""

    def __init__(self) -> None:
        self._collections: dict[str, Collection] = {}
        self.size = 0
        """How many collections there are (a plain attribute: the save planner reads it at every step)."""

    def get(self, name: str) -> Collection:
        """Return the collection, creating it (with its built-in regexes, if any) when missing."""
        coll = self._collections.get(name)
        if coll is None:
            coll = self._collections[name] = _builtin(name)
            self.size = len(self._collections)
        return coll

    def add(self, collection: Collection) -> None:
        """Add or replace a collection."""
        self._collections[collection.name] = collection
        self.size = len(self._collections)

    def __len__(self) -> int:
        return self.size

    def __contains__(self, name: object) -> bool:
        return name in self._collections

    def __iter__(self) -> Any:
        return iter(list(self._collections.values()))

    def names(self) -> list[str]:
        """Return the names of all collections."""
        return list(self._collections)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form of every collection."""
        return {name: c.to_dict() for name, c in self._collections.items()}


def activation_tags(type_name: str) -> tuple[frozenset[str], frozenset[str]]:
    """Return the activation collections that a module of this type's (inputs, outputs) belong to.

    Example:
        >>> activation_tags("ReLU")
        (frozenset({'relu_input'}), frozenset({'relu_output'}))
    """
    ins = frozenset(n for n, (types, inp) in ACTIVATION_COLLECTIONS.items() if inp and type_name in types)
    outs = frozenset(n for n, (types, inp) in ACTIVATION_COLLECTIONS.items() if not inp and type_name in types)
    return ins, outs


def _builtin(name: str) -> Collection:
    coll = Collection(name, include_regex=list(_BUILTIN_REGEX.get(name, [])))
    if name in ACTIVATION_COLLECTIONS:
        types, inputs = ACTIVATION_COLLECTIONS[name]
        coll.module_types |= set(types)
        coll.module_inputs, coll.module_outputs = inputs, not inputs
    if name == "all":
        coll.include(".*")
        coll.module_types.add("*")
        coll.module_inputs = coll.module_outputs = True
    elif name == "inputs":
        coll.module_types.add("*")
        coll.module_inputs = True
    elif name == "outputs":
        coll.module_types.add("*")
        coll.module_outputs = True
    if name in SCALAR_COLLECTIONS:
        coll.save_histogram = False
    return coll
