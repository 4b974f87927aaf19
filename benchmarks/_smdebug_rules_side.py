"""The shared rule workload and smdebug 1.0.34's side of benchmarks/bench_rules.py.

The workload (``make``/``train``) is plain torch and is imported by bench_rules.py too, so both hooks record the
same training. The smdebug side runs with bench-env/smdebug/bin/python and prints one JSON line:

    python benchmarks/_smdebug_rules_side.py write STEPS OUT                 -> writes an smdebug run into OUT
    python benchmarks/_smdebug_rules_side.py rules OUT END [NAME,...]         -> {"rules": {name: {...}}}

(per rule: ``open_seconds`` for ``create_trial`` and the rule's construction, ``loop_seconds`` for ``invoke_rule``,
``triggers`` and ``datapoints``, the steps judged).

smdebug ships no built-in rule code (the built-in rules run only in SageMaker's rule container), so the rules
below are straightforward per-step re-implementations of trainspect's built-in rules with the same parameters,
written on smdebug's public ``Rule`` and run with ``invoke_rule(rule, start_step=0, end_step=END)``, reading
``self.base_trial.tensor(name).value(step)`` / ``reduction_value(...)`` as smdebug's documentation does. Each rule
gets a fresh trial (a rule job opens its own); the time includes opening it. Tensor names are listed once per
rule, not at every step as in smdebug's documented example, which favours smdebug.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import deque
from typing import Any

os.environ.setdefault("SMDEBUG_TRAINING_END_DELAY_REFRESH", "0")
os.environ.setdefault("SMDEBUG_LOG_LEVEL", "error")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

torch.set_num_threads(1)

WIDTH, BATCH, LAYERS = 32, 16, 9
INCLUDE_REGEX = [".*relu_input", ".*relu_output", ".*tanh_input"]
COLLECTIONS = ["weights", "biases", "gradients", "losses"]


class Net(nn.Module):
    """9 Linear layers; ReLU after the first 7 (``lN_relu``), Tanh before the last (``l8_tanh``)."""

    def __init__(self) -> None:
        super().__init__()
        for i in range(1, LAYERS + 1):
            setattr(self, f"fc{i}", nn.Linear(WIDTH, 10 if i == LAYERS else WIDTH))
        for i in range(1, LAYERS - 1):
            setattr(self, f"l{i}_relu", nn.ReLU())
        self.l8_tanh = nn.Tanh()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layers = dict(self.named_children())
        for i in range(1, LAYERS - 1):
            x = layers[f"l{i}_relu"](layers[f"fc{i}"](x))
        return layers["fc9"](self.l8_tanh(layers["fc8"](x)))


def make(seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, nn.Module, list[Any]]:
    """Return model, optimizer, loss module and 16 fixed (x, y) batches with learnable labels."""
    torch.manual_seed(seed)
    model = Net()
    xs = [torch.randn(BATCH, WIDTH) for _ in range(16)]
    proj = torch.randn(WIDTH, 10)
    batches = [(x, (x @ proj).argmax(1)) for x in xs]
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), nn.CrossEntropyLoss(), batches


def train(model: nn.Module, opt: torch.optim.Optimizer, loss_fn: nn.Module, batches: list[Any], steps: int) -> float:
    """Train ``steps`` steps; return the seconds taken."""
    start = time.perf_counter()
    for i in range(steps):
        x, y = batches[i % len(batches)]
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return time.perf_counter() - start


# --- smdebug side -----------------------------------------------------------------------------------------------
def write(steps: int, out: str) -> None:
    import smdebug.pytorch as smd

    model, opt, loss_fn, batches = make()
    hook = smd.Hook(
        out_dir=out,
        save_config=smd.SaveConfig(save_interval=1),
        include_collections=COLLECTIONS,
        include_regex=INCLUDE_REGEX,
    )
    hook.register_module(model)
    hook.register_loss(loss_fn)
    train(model, opt, loss_fn, batches, steps)
    hook.close()


def _rule_classes() -> dict[str, Any]:  # noqa: C901 - one small class per rule, defined where smdebug is importable
    from smdebug.rules.rule import Rule

    class _Counting(Rule):
        def __init__(self, base_trial: Any) -> None:
            super().__init__(base_trial, action_str="")
            self.triggers = 0
            self.datapoints = 0

        def names(self, collection: str | None = None, regex: str | list[str] | None = None) -> list[str]:
            if collection is not None:
                return self.base_trial.tensor_names(collection=collection)
            return self.base_trial.tensor_names(regex=regex) if regex is not None else self.base_trial.tensor_names()

        def judged(self, triggered: bool | None) -> bool:
            if triggered is None:
                return False
            self.datapoints += 1
            self.triggers += bool(triggered)
            return bool(triggered)

    class VanishingGradient(_Counting):
        def __init__(self, base_trial: Any, threshold: float = 1e-7) -> None:
            super().__init__(base_trial)
            self.threshold = float(threshold)
            self.tnames = self.names(collection="gradients")

        def invoke_at_step(self, step: int) -> bool:
            values = []
            for tname in self.tnames:
                value = self.base_trial.tensor(tname).reduction_value(step, "mean", abs=True)
                if value is not None and math.isfinite(value):
                    values.append(value)
            return self.judged(min(values) < self.threshold if values else None)

    class ExplodingTensor(_Counting):
        def __init__(self, base_trial: Any, only_nan: bool = False) -> None:
            super().__init__(base_trial)
            self.only_nan = only_nan
            self.tnames = self.names()

        def invoke_at_step(self, step: int) -> bool:
            bad = False
            for tname in self.tnames:
                value = self.base_trial.tensor(tname).value(step)
                if not np.issubdtype(value.dtype, np.floating):
                    continue
                bad = bad or (bool(np.isnan(value).any()) if self.only_nan else not bool(np.isfinite(value).all()))
            return self.judged(bad)

    class PoorWeightInitialization(_Counting):
        def __init__(
            self,
            base_trial: Any,
            threshold: float = 10.0,
            distribution_range: float = 0.001,
            patience: int = 5,
            steps: int = 10,
        ) -> None:
            super().__init__(base_trial)
            self.threshold, self.distribution_range = threshold, distribution_range
            self.patience, self.steps = patience, steps
            self.acts = self.names(regex=".*relu_input")
            self.grads = self.names(collection="gradients")
            self.losses = self.names(collection="losses")
            self.seen, self.best, self.since_best = 0, math.inf, 0

        def invoke_at_step(self, step: int) -> bool:
            if self.seen >= self.steps:
                return False
            self.seen += 1
            var = [self.base_trial.tensor(n).reduction_value(step, "variance") for n in self.acts]
            var = [v for v in var if math.isfinite(v)]
            bad = len(var) >= 2 and (max(var) / min(var) if min(var) > 0 else math.inf) > self.threshold
            grads = np.concatenate([self.base_trial.tensor(n).value(step).ravel() for n in self.grads])
            grads = grads[np.isfinite(grads)]
            if grads.size:
                p5, p95 = np.percentile(grads, [5, 95])
                bad = bad or (p95 - p5) < self.distribution_range
            loss = float(np.mean([self.base_trial.tensor(n).value(step) for n in self.losses]))
            if loss < self.best:
                self.best, self.since_best = loss, 0
            else:
                self.since_best += 1
                bad = bad or self.since_best >= self.patience
            return self.judged(bad)

    class _PerUnit(_Counting):
        def share(self, value: np.ndarray, lo: float, hi: float, inactivity: float) -> float:
            x = value.reshape(value.shape[0], -1) if value.ndim > 1 else value.reshape(-1, 1)
            active = 100.0 * np.mean((x > lo) & (x < hi), axis=0)
            return 100.0 * float(np.mean(active < inactivity))

    class SaturatedActivation(_PerUnit):
        def __init__(
            self,
            base_trial: Any,
            threshold_tanh_min: float = -9.4999,
            threshold_tanh_max: float = 9.4999,
            threshold_inactivity: float = 1.0,
            threshold_layer: float = 50.0,
        ) -> None:
            super().__init__(base_trial)
            self.lo, self.hi = threshold_tanh_min, threshold_tanh_max
            self.inactivity, self.layer = threshold_inactivity, threshold_layer
            self.tnames = self.names(regex=[".*tanh_input"])

        def invoke_at_step(self, step: int) -> bool:
            pct = [
                self.share(self.base_trial.tensor(n).value(step), self.lo, self.hi, self.inactivity)
                for n in self.tnames
            ]
            return self.judged(max(pct) > self.layer if pct else None)

    class DeadRelu(_PerUnit):
        def __init__(self, base_trial: Any, threshold_inactivity: float = 1.0, threshold_layer: float = 50.0) -> None:
            super().__init__(base_trial)
            self.inactivity, self.layer = threshold_inactivity, threshold_layer
            self.tnames = self.names(regex=[".*relu_output"])

        def invoke_at_step(self, step: int) -> bool:
            pct = [
                self.share(self.base_trial.tensor(n).value(step), 0.0, math.inf, self.inactivity) for n in self.tnames
            ]
            return self.judged(max(pct) > self.layer if pct else None)

    class WeightUpdateRatio(_Counting):
        def __init__(
            self, base_trial: Any, large_threshold: float = 10.0, small_threshold: float = 1e-8, epsilon: float = 1e-9
        ) -> None:
            super().__init__(base_trial)
            self.large, self.small, self.epsilon = large_threshold, small_threshold, epsilon
            self.tnames = self.names(collection="weights")
            self.prev: dict[str, np.ndarray] = {}

        def invoke_at_step(self, step: int) -> bool:
            ratios = []
            for tname in self.tnames:
                cur = self.base_trial.tensor(tname).value(step).astype(np.float64)
                old = self.prev.get(tname)
                self.prev[tname] = cur
                if old is None:
                    continue
                ratio = float(np.linalg.norm(cur - old) / (np.linalg.norm(old) + self.epsilon))
                if math.isfinite(ratio):
                    ratios.append(ratio)
            return self.judged(any(r > self.large or r < self.small for r in ratios) if ratios else None)

    class AllZero(_Counting):
        def __init__(self, base_trial: Any, threshold: float = 100.0) -> None:
            super().__init__(base_trial)
            self.threshold = threshold
            self.tnames = sorted(set(self.names(collection="weights")) | set(self.names(regex=[".*relu_output"])))

        def invoke_at_step(self, step: int) -> bool:
            pct = []
            for tname in self.tnames:
                value = self.base_trial.tensor(tname).value(step)
                pct.append(100.0 * np.count_nonzero(value == 0) / value.size)
            return self.judged(max(pct) >= self.threshold if pct else None)

    class LossNotDecreasing(_Counting):
        def __init__(
            self,
            base_trial: Any,
            num_steps: int = 10,
            diff_percent: float = 0.1,
            increase_threshold_percent: float = 5.0,
        ) -> None:
            super().__init__(base_trial)
            self.num_steps, self.diff, self.rise = num_steps, diff_percent, increase_threshold_percent
            self.tnames = self.names(collection="losses")
            self.next_eval: dict[str, int] = {}
            self.hist: dict[str, deque[tuple[int, float]]] = {}
            self.best: dict[str, float] = {}

        def invoke_at_step(self, step: int) -> bool:
            bad: bool | None = None
            for tname in self.tnames:
                loss = float(self.base_trial.tensor(tname).value(step))
                hist = self.hist.setdefault(tname, deque())
                hist.append((step, loss))
                while len(hist) >= 2 and hist[1][0] <= step - self.num_steps:
                    hist.popleft()
                if hist[0][0] > step - self.num_steps or step < self.next_eval.get(tname, 0):
                    continue
                self.next_eval[tname] = step + self.num_steps
                bad = bool(bad) or self._judge(tname, hist[0][1], loss)
            return self.judged(bad)

        def _judge(self, tname: str, prev: float, loss: float) -> bool:
            if not (math.isfinite(prev) and math.isfinite(loss)):
                return True
            decrease = 100.0 * (prev - loss) / abs(prev) if prev else 0.0
            best = self.best.get(tname, math.inf)
            triggered = decrease < self.diff or (
                math.isfinite(best) and best > 0 and loss > best * (1 + self.rise / 100)
            )
            self.best[tname] = min(best, loss, prev)
            return triggered

    class TensorVariance(_Counting):
        def __init__(self, base_trial: Any, max_threshold: float = 10.0, min_threshold: float = 1e-5) -> None:
            super().__init__(base_trial)
            self.max, self.min = max_threshold, min_threshold
            self.tnames = sorted(set(self.names(collection="weights")) | set(self.names(collection="gradients")))

        def invoke_at_step(self, step: int) -> bool:
            var = [self.base_trial.tensor(n).reduction_value(step, "variance") for n in self.tnames]
            var = [v for v in var if not math.isnan(v)]
            return self.judged(any(v > self.max or v < self.min for v in var) if var else None)

    class UnchangedTensor(_Counting):
        def __init__(self, base_trial: Any, num_steps: int = 3, rtol: float = 1e-5, atol: float = 1e-8) -> None:
            super().__init__(base_trial)
            self.num_steps, self.rtol, self.atol = num_steps, rtol, atol
            self.tnames = self.names(collection="weights")
            self.hist: dict[str, deque[np.ndarray]] = {}

        def invoke_at_step(self, step: int) -> bool:
            judged, same = 0, 0
            for tname in self.tnames:
                hist = self.hist.setdefault(tname, deque(maxlen=self.num_steps))
                hist.append(self.base_trial.tensor(tname).value(step))
                if len(hist) < self.num_steps:
                    continue
                judged += 1
                same += all(np.allclose(v, hist[-1], rtol=self.rtol, atol=self.atol) for v in list(hist)[:-1])
            return self.judged(same > 0 if judged else None)

    classes = [
        VanishingGradient,
        ExplodingTensor,
        PoorWeightInitialization,
        SaturatedActivation,
        DeadRelu,
        WeightUpdateRatio,
        AllZero,
        LossNotDecreasing,
        TensorVariance,
        UnchangedTensor,
    ]
    return {c.__name__: c for c in classes}


def rules(out: str, end: int, wanted: list[str] | None) -> None:
    import logging

    from smdebug.rules.rule_invoker import invoke_rule
    from smdebug.trials import create_trial

    logging.getLogger("smdebug").setLevel(logging.ERROR)
    results = {}
    for name, cls in _rule_classes().items():
        if wanted and name not in wanted:
            continue
        start = time.perf_counter()
        rule = cls(create_trial(out))
        opened = time.perf_counter()
        invoke_rule(rule, start_step=0, end_step=end)
        done = time.perf_counter()
        results[name] = {
            "open_seconds": opened - start,
            "loop_seconds": done - opened,
            "triggers": rule.triggers,
            "datapoints": rule.datapoints,
        }
    print(json.dumps({"rules": results}))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(int(sys.argv[2]), sys.argv[3])
    else:
        rules(sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",") if len(sys.argv) > 4 else None)
