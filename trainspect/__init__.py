"""trainspect: a local debugger and profiler for deep-learning training jobs."""

from trainspect import modes
from trainspect.exceptions import ConfigError, TrainingStopped
from trainspect.modes import ModeKeys

__version__ = "0.1.0"

__all__ = ["ConfigError", "ModeKeys", "TrainingStopped", "__version__", "modes"]
