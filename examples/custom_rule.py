"""A custom rule in a few lines: flag steps whose gradient L2 norm exceeds a limit (gradient clipping's signal).

Run it:  python examples/custom_rule.py [RUN_DIR]
Without RUN_DIR it trains a tiny PyTorch model with the rule evaluated live, then evaluates the same run
offline; with RUN_DIR it evaluates that (finished) run directory.
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any, ClassVar

from trainspect.rules import Check, Param, Select, StepData, TensorRule, evaluate


class LargeGradientNorm(TensorRule):
    """Trigger when a gradient's L2 norm is above ``max_norm``.

    Heuristic: exploding gradients precede divergence; norms far above the clipping threshold say so
    (Pascanu, Mikolov and Bengio 2013).
    """

    parameters: ClassVar[tuple[Param, ...]] = (Param("max_norm", float, 10.0, "largest acceptable L2 norm", min=0),)
    max_norm: float  # set by the constructor from the Param above
    recommendation: ClassVar[str] = "Clip gradients (torch.nn.utils.clip_grad_norm_) or lower the learning rate."
    series_label: ClassVar[str] = "max gradient L2 norm"

    def selects(self) -> list[Select]:
        # the hook records only the l2 reduction of the gradients for this rule
        return [Select(collections=("gradients",), reductions=("l2",), raw=False)]

    def chart_threshold(self) -> float:  # drawn with the series in the report
        return self.max_norm

    def check(self, state: Any, data: StepData) -> Check | None:
        from trainspect.rules.step_data import tensor_reduction

        norms = {t.name: tensor_reduction(t, "l2") for t in data.role()}
        norms = {k: v for k, v in norms.items() if v is not None}
        if not norms:
            return None
        worst = max(norms, key=norms.__getitem__)
        big = tuple(k for k, v in norms.items() if v > self.max_norm)
        return Check(
            norms[worst], bool(big), big, f"L2 norm of {worst} is {norms[worst]:.3g} (threshold {self.max_norm})"
        )


def train(out_dir: str) -> None:
    import torch

    import trainspect as ts

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.MSELoss()
    x = torch.randn(128, 8)
    y = x.sum(dim=1, keepdim=True) * 10
    rules = [LargeGradientNorm(max_norm=50.0, actions=["log"]), ts.rules.LossNotDecreasing()]
    with ts.torch.Hook(out_dir, save_config=ts.SaveConfig(save_interval=1), rules=rules) as hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        for _ in range(30):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()


def main(argv: list[str]) -> int:
    run_dir = argv[1] if len(argv) > 1 else None
    if run_dir is None:
        run_dir = tempfile.mkdtemp(prefix="trainspect-custom-rule-") + "/run"
        train(run_dir)
    for v in evaluate(run_dir, [LargeGradientNorm(max_norm=50.0)]):
        print(f"{v.rule}: {v.status.value}, {v.triggers}/{v.datapoints} steps; {v.message}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
