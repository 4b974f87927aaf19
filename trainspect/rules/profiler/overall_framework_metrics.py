"""OverallFrameworkMetrics: where the training time went (spec 2.11); never triggers."""

from __future__ import annotations

from typing import Any

from trainspect.profiler.analysis import phase_ratios, step_statistics, top_operators
from trainspect.profiler.data import ProfilerData
from trainspect.rules.profiler._common import ProfilerRule
from trainspect.rules.verdict import Status, Verdict

__all__ = ["OverallFrameworkMetrics"]


class OverallFrameworkMetrics(ProfilerRule):
    """Summarise where the training time went.

    Ratios of train/eval/other time, of forward/backward/optimizer/dataloader time, and CPU/GPU operators
    above 2% (renormalised) in ``details``. Never triggers.

    Example:
        >>> OverallFrameworkMetrics().name
        'OverallFrameworkMetrics'
    """

    parameters = ()
    recommendation = ""
    description = "framework time breakdown"

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Summarise every worker."""
        if not data.framework or not (data.has_steps or any(len(t.spans["kind"]) for t in data.framework.values())):
            return self.no_data("no framework metrics were recorded")
        ratios = phase_ratios(data)
        details: dict[str, Any] = {"phase": ratios["modes"], "spans": ratios["spans"]}
        fwd, bwd = ratios["spans"].get("forward", 0.0), ratios["spans"].get("backward", 0.0)
        if fwd > 0 and bwd > 0:
            details["forward_backward"] = {"forward": 100 * fwd / (fwd + bwd), "backward": 100 * bwd / (fwd + bwd)}
        for device in ("cpu", "gpu"):
            ops = top_operators(data, device, n=1000)
            big = ops[ops["percent"] > 2.0]
            total = float(big["percent"].sum())
            if total > 0:
                details[device.upper()] = {str(r.name): 100.0 * float(r.percent) / total for r in big.itertuples()}
                details[f"{device.upper()}_total"] = {str(r.name): float(r.self_time_us) for r in big.itertuples()}
        stats = step_statistics(data)
        details["steps"] = stats.to_dict(orient="records")
        if data.has_steps:
            other = ratios["modes"].get("other", 0.0)
            msg = f"{other:.1f}% of the training loop was spent outside steps"
            if other > 25:
                msg += " (more than 25%: check the time between steps)"
        else:  # spans only (a profiled loop without step boundaries): no loop to split
            msg = "no steps were recorded: the time outside steps is unknown"
        if "forward_backward" in details:
            fb = details["forward_backward"]
            msg += f"; forward {fb['forward']:.0f}% / backward {fb['backward']:.0f}%"
        return self.verdict(Status.NO_ISSUES_FOUND, msg, int(stats["count"].sum()) if len(stats) else 0, (), details)
