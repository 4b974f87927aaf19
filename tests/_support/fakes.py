"""Stand-ins at two boundaries the report and the MLflow logger read through: a Trial's loss, an MLflow run."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainspect.modes import ModeKeys


class LossTensor:
    """A Trial tensor's values by mode (``ModeKeys`` value) and mode step."""

    def __init__(self, by_mode: dict[int, dict[int, float]]) -> None:
        self.by_mode = by_mode

    def values(self, mode: object) -> dict[int, np.ndarray]:
        return {s: np.array(v) for s, v in self.by_mode.get(int(mode), {}).items()}  # type: ignore[call-overload]

    def steps(self, mode: object) -> list[int]:
        return sorted(self.by_mode.get(int(mode), {}))  # type: ignore[call-overload]

    def value(self, step: int, mode: object) -> np.ndarray:
        return np.array(self.by_mode[int(mode)][step])  # type: ignore[call-overload]


class LossTrial:
    """A Trial holding one loss tensor: TRAIN values (global step 100 + step) and EVAL values (``eval_globals``)."""

    def __init__(
        self,
        train: dict[int, float],
        evals: dict[int, float] | None = None,
        eval_globals: dict[int, int] | None = None,
        name: str = "loss",
    ) -> None:
        self.name = name
        self.tensors = {name: LossTensor({1: train, 2: evals or {}})}
        self.eval_globals = eval_globals or {}
        self._train_steps = sorted(train)

    def has_tensor(self, name: str) -> bool:
        return name in self.tensors

    def tensor_names(self, collection: str = "") -> list[str]:
        return list(self.tensors)

    def tensor(self, name: str) -> Any:
        return self.tensors[name]

    def global_step(self, mode: object, step: int) -> int:
        return self.eval_globals[step] if int(mode) == 2 else 100 + step  # type: ignore[call-overload]

    def steps(self, mode: object = None) -> list[int]:
        return list(self._train_steps)

    def workers(self) -> list[str]:
        return ["worker_0"]

    def modes(self) -> list[ModeKeys]:
        return [ModeKeys.TRAIN]


class RecordingSink:
    """An MLflow sink that records what it is sent (no server); with ``fail`` every call raises."""

    run_id, tracking_uri = "r1", "file:///nowhere"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.metrics: list[Any] = []
        self.tags: dict[str, str] = {}

    def log(self, metrics: Any = (), tags: Any = None) -> None:
        if self.fail:
            raise ConnectionError("down")
        self.metrics.extend(metrics)
        self.tags.update(tags or {})

    def log_params(self, params: Any) -> dict[str, str]:
        if self.fail:
            raise ConnectionError("down")
        return dict(params)

    def reachable(self) -> bool:
        return not self.fail

    def end(self, status: str = "FINISHED") -> None:
        pass

    def log_artifact(self, path: Any, artifact_path: str | None = None) -> None:
        pass

    def log_artifacts(self, directory: Any, artifact_path: str | None = None) -> None:
        pass
