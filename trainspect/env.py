"""Every environment variable trainspect reads, declared once as a typed object.

No other module reads ``os.environ``; a test greps for it. Each variable is a documented override of an
explicit argument, never the only way to configure something.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = [
    "EnvVar",
    "TRAINSPECT_DISABLE",
    "TRAINSPECT_CONFIG",
    "SMDEBUG_CONFIG_FILE_PATH",
    "TRAINSPECT_SMDEBUG",
    "TRAINSPECT_OUT_DIR",
    "TRAINSPECT_NODE_ID",
    "TRAINSPECT_TESTING",
    "TRAINSPECT_RUN_ACTIVE",
    "TRAINSPECT_MLFLOW",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_DEVICE_ORDER",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "SLURM_PROCID",
    "HOROVOD_RANK",
    "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK",
    "HOROVOD_GLOO_RENDEZVOUS_ADDR",
    "HOROVOD_GLOO_RENDEZVOUS_PORT",
    "HOROVOD_TIMELINE",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_JOB_ID",
    "MLFLOW_RUN_ID",
    "RAY_RAYLET_PID",
    "PWD",
    "PYTHONPATH",
    "TRAINSPECT_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TRAINSPECT_PROFILE",
    "TRAINSPECT_PROFILER_RULES_S",
    "TRAINSPECT_SIGNAL_NOTES",
    "TRAINSPECT_SPOOL_DIR",
    "TRAINSPECT_SPOOL_MB",
    "TRAINSPECT_UPLOAD_INTERVAL_MS",
    "TRAINSPECT_UPLOAD_CLOSE_S",
    "AWS_ENDPOINT_URL",
    "child_environment",
]

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    """One environment variable: its name, type, default and meaning.

    Example:
        >>> EnvVar("TRAINSPECT_EXAMPLE_FLAG", bool, False, "an example").get()
        False
    """

    name: str
    type: type
    default: T
    doc: str

    def is_set(self) -> bool:
        """Return whether the variable is present in the environment."""
        return self.name in os.environ

    def get(self) -> T:
        """Return the parsed value, or the default when unset.

        Raises:
            ValueError: the value cannot be parsed as the declared type.
        """
        raw = os.environ.get(self.name)
        if raw is None:
            return self.default
        return self._parse(raw)

    def _parse(self, raw: str) -> T:
        if self.type is bool:
            low = raw.strip().lower()
            if low in _TRUE:
                return True  # type: ignore[return-value]
            if low in _FALSE:
                return False  # type: ignore[return-value]
            raise ValueError(f"{self.name}={raw!r}: expected one of 1/0, true/false, yes/no, on/off")
        if self.type is int:
            try:
                return int(raw)  # type: ignore[return-value]
            except ValueError:
                raise ValueError(f"{self.name}={raw!r}: expected an integer") from None
        if self.type is float:
            try:
                value = float(raw)
            except ValueError:
                value = float("nan")
            if not value > 0 or value == float("inf"):
                raise ValueError(f"{self.name}={raw!r}: expected a finite number > 0")
            return value  # type: ignore[return-value]
        return raw  # type: ignore[return-value]

    def set(self, value: T | None) -> None:
        """Set (or, with None, remove) the variable for this process and its children."""
        if value is None:
            os.environ.pop(self.name, None)
        elif isinstance(value, bool):
            os.environ[self.name] = "1" if value else "0"
        else:
            os.environ[self.name] = str(value)


TRAINSPECT_DISABLE: EnvVar[bool] = EnvVar(
    "TRAINSPECT_DISABLE", bool, False, "1 turns every hook, monitor and patch of trainspect off."
)
TRAINSPECT_CONFIG: EnvVar[str | None] = EnvVar(
    "TRAINSPECT_CONFIG", str, None, "Path of the JSON hook config read by Hook.create_from_json_file()."
)
SMDEBUG_CONFIG_FILE_PATH: EnvVar[str | None] = EnvVar(
    "SMDEBUG_CONFIG_FILE_PATH", str, None, "SageMaker Debugger's hook config (read when TRAINSPECT_CONFIG is unset)."
)
TRAINSPECT_SMDEBUG: EnvVar[bool] = EnvVar(
    "TRAINSPECT_SMDEBUG", bool, False, "1 answers `import smdebug` with trainspect (on under `trainspect run`)."
)
TRAINSPECT_OUT_DIR: EnvVar[str | None] = EnvVar(
    "TRAINSPECT_OUT_DIR", str, None, "Run directory used by `trainspect run` and autolog() when none is given."
)
TRAINSPECT_NODE_ID: EnvVar[str | None] = EnvVar(
    "TRAINSPECT_NODE_ID", str, None, "Name of this node in the run directory (default: the host name)."
)
TRAINSPECT_TESTING: EnvVar[bool] = EnvVar(
    "TRAINSPECT_TESTING", bool, False, "1 makes the hook guard re-raise internal errors (used by the test suite)."
)
TRAINSPECT_RUN_ACTIVE: EnvVar[bool] = EnvVar(
    "TRAINSPECT_RUN_ACTIVE", bool, False, "Set by `trainspect run` for the child process: instrument at start-up."
)
TRAINSPECT_MLFLOW: EnvVar[str | None] = EnvVar(
    "TRAINSPECT_MLFLOW", str, None, "'1' forces MLflow logging on, '0' off; unset: on when a run is active."
)
CUDA_VISIBLE_DEVICES: EnvVar[str | None] = EnvVar(
    "CUDA_VISIBLE_DEVICES", str, None, "GPUs visible to the job; the system monitor samples only these."
)
CUDA_DEVICE_ORDER: EnvVar[str | None] = EnvVar(
    "CUDA_DEVICE_ORDER", str, None, "CUDA's device numbering: PCI_BUS_ID, or FASTEST_FIRST (the default)."
)
RANK: EnvVar[int] = EnvVar("RANK", int, 0, "Global rank (set by torchrun).")
LOCAL_RANK: EnvVar[int] = EnvVar("LOCAL_RANK", int, 0, "Rank on this node (set by torchrun).")
WORLD_SIZE: EnvVar[int] = EnvVar("WORLD_SIZE", int, 1, "Number of ranks (set by torchrun).")
HOROVOD_RANK: EnvVar[int] = EnvVar("HOROVOD_RANK", int, 0, "Global rank of a process started by horovodrun.")
HOROVOD_SIZE: EnvVar[int] = EnvVar("HOROVOD_SIZE", int, 1, "Number of processes started by horovodrun.")
HOROVOD_LOCAL_RANK: EnvVar[int] = EnvVar("HOROVOD_LOCAL_RANK", int, 0, "Rank on its host of a horovodrun process.")
HOROVOD_GLOO_RENDEZVOUS_ADDR: EnvVar[str | None] = EnvVar(
    "HOROVOD_GLOO_RENDEZVOUS_ADDR", str, None, "horovodrun's rendezvous host (Gloo controller)."
)
HOROVOD_GLOO_RENDEZVOUS_PORT: EnvVar[str | None] = EnvVar(
    "HOROVOD_GLOO_RENDEZVOUS_PORT", str, None, "horovodrun's rendezvous port (Gloo controller)."
)
HOROVOD_TIMELINE: EnvVar[str | None] = EnvVar(
    "HOROVOD_TIMELINE", str, None, "Horovod's timeline file (copied into the run when rank 0's hook closes)."
)
SLURM_PROCID: EnvVar[int] = EnvVar("SLURM_PROCID", int, 0, "Global rank of a task started by Slurm's srun.")
SLURM_NTASKS: EnvVar[int] = EnvVar("SLURM_NTASKS", int, 1, "Number of tasks of a Slurm job step.")
SLURM_LOCALID: EnvVar[int] = EnvVar("SLURM_LOCALID", int, 0, "Rank of a Slurm task on its node.")
SLURM_JOB_ID: EnvVar[str | None] = EnvVar("SLURM_JOB_ID", str, None, "Slurm's job id (part of the job id of a run).")
MLFLOW_RUN_ID: EnvVar[str | None] = EnvVar("MLFLOW_RUN_ID", str, None, "MLflow run to attach to.")
RAY_RAYLET_PID: EnvVar[str | None] = EnvVar(
    "RAY_RAYLET_PID", str, None, "Set by Ray in its worker processes (a relative out_dir is then taken from PWD)."
)
PWD: EnvVar[str | None] = EnvVar("PWD", str, None, "The directory the shell started the job from (POSIX shells).")
TRAINSPECT_PROFILE: EnvVar[int | None] = EnvVar(
    "TRAINSPECT_PROFILE", int, None, "Set by `trainspect run --profile`: system sampling interval in ms."
)
TRAINSPECT_PROFILER_RULES_S: EnvVar[float] = EnvVar(
    "TRAINSPECT_PROFILER_RULES_S", float, 60.0, "Seconds between the live evaluations of the profiler rules."
)
TRAINSPECT_SIGNAL_NOTES: EnvVar[str | None] = EnvVar(
    "TRAINSPECT_SIGNAL_NOTES", str, None, "Set by `trainspect run` for its child: '<pid>:<fd>' of the signal pipe."
)
TRAINSPECT_JOB_ID: EnvVar[str | None] = EnvVar(
    "TRAINSPECT_JOB_ID", str, None, "Identifies the job that owns a run directory (all its ranks share it)."
)
TORCHELASTIC_RUN_ID: EnvVar[str | None] = EnvVar("TORCHELASTIC_RUN_ID", str, None, "Job id set by torchrun.")
MASTER_ADDR: EnvVar[str | None] = EnvVar("MASTER_ADDR", str, None, "Rendezvous host (torch.distributed).")
MASTER_PORT: EnvVar[str | None] = EnvVar("MASTER_PORT", str, None, "Rendezvous port (torch.distributed).")
PYTHONPATH: EnvVar[str | None] = EnvVar("PYTHONPATH", str, None, "Module search path (extended by `trainspect run`).")
TRAINSPECT_SPOOL_DIR: EnvVar[str | None] = EnvVar(
    "TRAINSPECT_SPOOL_DIR", str, None, "Where URL run directories are spooled before upload (default: the temp dir)."
)
TRAINSPECT_SPOOL_MB: EnvVar[int] = EnvVar(
    "TRAINSPECT_SPOOL_MB", int, 1024, "Bytes (MiB) not yet uploaded beyond which tensor capture pauses (URL runs)."
)
TRAINSPECT_UPLOAD_INTERVAL_MS: EnvVar[int] = EnvVar(
    "TRAINSPECT_UPLOAD_INTERVAL_MS", int, 5000, "Milliseconds between uploads of a URL run directory's new parts."
)
TRAINSPECT_UPLOAD_CLOSE_S: EnvVar[int] = EnvVar(
    "TRAINSPECT_UPLOAD_CLOSE_S", int, 60, "Seconds a closing hook waits for the last uploads of a URL run."
)
AWS_ENDPOINT_URL: EnvVar[str | None] = EnvVar(
    "AWS_ENDPOINT_URL", str, None, "S3 endpoint (standard AWS variable; passed to s3fs for versions that ignore it)."
)


def child_environment(overrides: dict[str, str | None]) -> dict[str, str]:
    """Return a copy of this process's environment with ``overrides`` applied (None removes a variable)."""
    out = dict(os.environ)
    for key, value in overrides.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out
