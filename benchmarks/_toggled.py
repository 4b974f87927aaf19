"""The hook configurations the overhead benchmarks toggle, with their step-time targets (the issues' targets)."""

from __future__ import annotations

import trainspect as ts

TOGGLED = {
    "default (losses every step)": (dict(), 1.03),
    "weights+gradients+losses every 100": (
        dict(
            include_collections=["weights", "biases", "gradients", "losses"],
            save_config=ts.SaveConfig(save_interval=100),
        ),
        1.05,
    ),
}
