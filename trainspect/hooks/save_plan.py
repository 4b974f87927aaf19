"""Which collections are recorded, and for one step which tensors are saved raw, as reductions, or as histograms."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from trainspect.collections import (
    ACTIVATION_COLLECTIONS,
    ALWAYS_SAVED,
    DEFAULT_COLLECTIONS,
    Collection,
    CollectionManager,
    activation_tags,
)
from trainspect.config import ReductionConfig, SaveConfig
from trainspect.exceptions import ConfigError
from trainspect.modes import ModeKeys
from trainspect.reductions import format_key
from trainspect.rules.base import Requirement

__all__ = ["TensorPlan", "SavePlanner"]

KNOWN_COLLECTIONS = (
    "all",
    "default",
    "weights",
    "biases",
    "gradients",
    "losses",
    "inputs",
    "outputs",
    "optimizer_variables",
    "scalars",
    *ACTIVATION_COLLECTIONS,
)


_TAGGED = ("weights", "biases", "gradients")
"""Built-in collections by name that a saved tensor joins even when only another collection records it."""


@dataclass(frozen=True)
class TensorPlan:
    """What to save of one tensor at the current step."""

    raw: bool
    reductions: tuple[tuple[str, bool], ...]
    histogram: bool
    collections: frozenset[str]


_NOTHING = TensorPlan(False, (), False, frozenset())


class SavePlanner:
    """Resolves the hook's configuration into per-step, per-tensor save decisions (cached per name and step)."""

    def __init__(
        self,
        manager: CollectionManager,
        include: Iterable[str | Collection],
        save_config: SaveConfig,
        reduction_config: ReductionConfig | None,
        include_regex: Iterable[str] | None,
        save_all: bool,
    ) -> None:
        self.manager = manager
        self.save_config = save_config
        self.reduction_config = reduction_config
        self.included: set[str] = set()
        self._user_configured: set[str] = set()
        for item in include:
            self._include(item)
        for name in ALWAYS_SAVED:
            self.included.add(name)
        if include_regex:
            self.manager.get("default").include(list(include_regex))
            self.included.add("default")
        if save_all:
            self.included.add("all")
        losses = self.manager.get("losses")
        if losses.save_config is None:
            losses.save_config = SaveConfig(save_interval=1)
        self._membership: dict[str, frozenset[str]] = {}
        self._active: set[str] = set()
        # what _active was decided for (see begin_step): the mode, how many collections, their save_configs' version
        self._schedule_mode: ModeKeys | None = None
        self._schedule_count = self._schedule_configs = -1
        self._schedule_until: float = 0
        self.generation = 0
        self._takes_modules = False
        self._plans: dict[object, TensorPlan] = {}  # per tensor (and its module's collections), this step
        self._shared_plans: dict[tuple[frozenset[str], frozenset[str]], TensorPlan] = {}  # per membership, this step
        self._tag_cache: dict[object, frozenset[str]] = {}  # cleared with _membership
        self._known_count = -1
        self._module_plans: dict[tuple[str, str, int], tuple[frozenset[str], frozenset[str]]] = {}

    def _include(self, item: str | Collection) -> None:
        if isinstance(item, Collection):
            name = item.name
            if name in KNOWN_COLLECTIONS and not item.include_regex and not item.tensor_names:
                builtin = self.manager.get(name)
                builtin.save_config = item.save_config or builtin.save_config
                builtin.reduction_config = item.reduction_config or builtin.reduction_config
                builtin.save_histogram = item.save_histogram
            else:
                self.manager.add(item)
        else:
            name = str(item)
            if name not in KNOWN_COLLECTIONS and name not in self.manager:
                raise ConfigError(
                    f"include_collections: unknown collection {name!r}; built-in: {', '.join(KNOWN_COLLECTIONS)}, "
                    "or define it first with hook.get_collection(name).include(regex)"
                )
            self.manager.get(name)
        coll = self.manager.get(name)
        if coll.save_config is not None or coll.reduction_config is not None:
            self._user_configured.add(name)
        self.included.add(name)

    @staticmethod
    def default_collections() -> tuple[str, ...]:
        """Collections recorded when the user names none: losses only."""
        return DEFAULT_COLLECTIONS

    def add_requirement(self, req: Requirement) -> None:
        """Record what a rule needs, never taking away what the user asked for.

        The rule's reductions are added to the collection's; its save interval applies unless the user configured
        the collection. A collection the user included keeps its raw tensors (and so its histograms) even when the
        rule needs only reductions.
        """
        user_included = req.collection in self.included
        coll = self.manager.get(req.collection)
        if req.include_regex:
            coll.include([r for r in req.include_regex if r not in coll.include_regex])
        coll.module_types |= set(req.module_types)
        coll.module_inputs = coll.module_inputs or req.module_inputs
        coll.module_outputs = coll.module_outputs or req.module_outputs
        if req.collection not in self._user_configured and req.save_interval is not None:
            current = coll.save_config.get_save_config(ModeKeys.TRAIN).save_interval if coll.save_config else None
            interval = req.save_interval if current is None else min(current, req.save_interval)
            coll.save_config = SaveConfig(save_interval=interval)
        self._add_reductions(coll, req, keep_raw=user_included)
        self.included.add(req.collection)

    def _add_reductions(self, coll: Collection, req: Requirement, keep_raw: bool) -> None:
        wanted = ReductionConfig.from_string(",".join(req.reductions)) if req.reductions else None
        base = coll.reduction_config or self.reduction_config
        if req.raw or (keep_raw and (base is None or not base.has_reductions)):
            if base is not None and base.has_reductions:
                coll.reduction_config = replace(base, save_raw_tensor=True)
            elif wanted is not None:
                coll.reduction_config = replace(wanted, save_raw_tensor=True)
            return
        if wanted is None:
            return
        if base is None:
            coll.reduction_config = wanted
            return
        merged = sorted(set(base.names()) | set(wanted.names()))
        text = ",".join(format_key(n, a) for n, a in merged)
        coll.reduction_config = ReductionConfig.from_string(text, save_raw_tensor=base.save_raw_tensor)

    # --- per step ------------------------------------------------------------------------------------------
    def _include_user_collections(self) -> None:
        """Include collections the user created on the hook (``hook.get_collection("x")``) after construction."""
        if self.manager.size == self._known_count:
            return
        self._known_count = self.manager.size
        custom = {n for n in self.manager.names() if n not in KNOWN_COLLECTIONS} - self.included
        if custom:
            self.included |= custom
            self._membership.clear()
            self._tag_cache.clear()
            self._clear_plans()
            self.generation += 1

    def begin_step(self, mode: ModeKeys, mode_step: int) -> bool:
        """Decide which included collections save at this step; return whether any does.

        The decision holds until the first step at which some included collection's schedule may change
        (``SaveConfigMode.stable_until``): steps before it reuse it, unless the mode, the included collections or a
        collection's ``save_config`` changed.
        """
        if self.manager.size != self._known_count:
            self._include_user_collections()
        if self._module_plans:
            self._module_plans.clear()  # collections may have gained modules since the last step
        count, configs = len(self.included), Collection.save_configs_changed
        if (
            mode_step < self._schedule_until
            and mode is self._schedule_mode
            and count == self._schedule_count
            and configs == self._schedule_configs
        ):  # compared one by one: a tuple of them would be built at every step
            return bool(self._active)
        get, default = self.manager.get, self.save_config
        active, until = set(), math.inf
        for name in self.included:
            cfg = (get(name).save_config or default).modes[mode]
            if cfg.should_save(mode_step):
                active.add(name)
            stable = cfg.stable_until(mode_step)
            if stable is not None and stable < until:
                until = stable
        self._schedule_mode, self._schedule_count, self._schedule_configs = mode, count, configs
        self._schedule_until = until
        if active != self._active:
            self._active = active
            self._clear_plans()
            self.generation += 1
            self._takes_modules = any(self._takes_module_tensors(get(c)) for c in active)
        return bool(active)

    def _clear_plans(self) -> None:
        self._plans.clear()
        self._shared_plans.clear()

    @staticmethod
    def _takes_module_tensors(coll: Collection) -> bool:
        # by module, or by a regex or name that may match "<module>_input_<i>" / "<module>_output_<i>"
        by_name = coll.name not in ("losses", "weights", "biases", "gradients", "optimizer_variables", "scalars") and (
            bool(coll.include_regex) or bool(coll.tensor_names)
        )
        return coll.module_inputs or coll.module_outputs or by_name

    @property
    def takes_modules(self) -> bool:
        """Whether a collection saving at the current step takes module inputs or outputs."""
        return self._takes_modules

    def is_active(self, collection: str) -> bool:
        """Whether a collection saves at the current step."""
        return collection in self._active

    @property
    def any_active(self) -> bool:
        """Whether anything saves at the current step."""
        return bool(self._active)

    def membership(self, name: str, extra: Iterable[str] = ()) -> frozenset[str]:
        """Return the included collections a tensor belongs to (cached)."""
        cached = self._membership.get(name)
        if cached is None:
            cached = frozenset(c for c in self.included if self.manager.get(c).matches(name))
            self._membership[name] = cached
        return cached | frozenset(extra) if extra else cached

    def plan(self, name: str, extra: Iterable[str] = ()) -> TensorPlan:
        """Return what to save of a tensor at this step (``extra``: collections it joins by module)."""
        key = (name, extra) if extra else name
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan_of(self.membership(name, extra), self._tags(key, name, extra))
        return plan

    def _plan_of(self, membership: frozenset[str], tags: frozenset[str]) -> TensorPlan:
        """The plan of a tensor in these collections (``tags``: see :meth:`_tags`), shared by the tensors alike."""
        plan = self._shared_plans.get((membership, tags))
        if plan is None:
            colls = [c for c in membership if c in self._active]
            plan = self._make_plan(colls) if colls else _NOTHING
            if plan.raw or plan.reductions:  # a weight or activation saved for another collection is still one
                extra_tags = tags.difference(colls)
                if extra_tags:
                    plan = replace(plan, collections=plan.collections | extra_tags)
            self._shared_plans[(membership, tags)] = plan
        return plan

    def _tags(self, key: object, name: str, extra: Iterable[str]) -> frozenset[str]:
        """Built-in collections a saved tensor belongs to whether or not they are recorded (``save_all``…).

        Cached per ``key``, as :meth:`membership` is.
        """
        tags = self._tag_cache.get(key)
        if tags is None:
            by_module = frozenset(extra).intersection(ACTIVATION_COLLECTIONS) if extra else frozenset()
            tags = by_module | frozenset(c for c in _TAGGED if self.manager.get(c).matches(name))
            self._tag_cache[key] = tags
        return tags

    def _make_plan(self, names: list[str]) -> TensorPlan:
        raw, hist, reductions = False, False, set()
        for cname in names:
            coll = self.manager.get(cname)
            if coll.is_scalar:
                raw = True
                continue
            rc = coll.reduction_config or self.reduction_config
            if rc is None or not rc.has_reductions:
                raw = True
            else:
                reductions |= set(rc.names())
                raw = raw or rc.save_raw_tensor
            hist = hist or coll.save_histogram
        return TensorPlan(raw, tuple(sorted(reductions)), hist and raw, frozenset(names))

    def forced_plan(self, name: str, collections: Iterable[str]) -> TensorPlan:
        """Return the plan of a tensor the user saves explicitly (saved whatever the step's schedule)."""
        names = sorted(set(collections) | set(self.membership(name)))
        return self._make_plan(names)

    def module_collections(
        self, path: str, type_name: str, module: object = None
    ) -> tuple[frozenset[str], frozenset[str]]:
        """Return the included collections that take this module's (inputs, outputs)."""
        key = (path, type_name, id(module))
        cached = self._module_plans.get(key)
        if cached is not None:
            return cached
        self._include_user_collections()
        ins, outs = set(), set()
        for cname in self.included:
            wants_in, wants_out = self.manager.get(cname).wants_module(path, type_name, module)
            if wants_in:
                ins.add(cname)
            if wants_out:
                outs.add(cname)
        tag_in, tag_out = activation_tags(type_name)
        for tag in tag_in | tag_out:
            self.manager.get(tag)  # listed in the collections file with its members
        result = frozenset(ins) | tag_in, frozenset(outs) | tag_out
        self._module_plans[key] = result
        return result
