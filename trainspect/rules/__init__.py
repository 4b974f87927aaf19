"""Rules: built-in tensor and profiler rules, the engine that evaluates them, verdicts and actions."""

from trainspect.rules.base import Param, Rule
from trainspect.rules.verdict import Series, Status, Verdict, read_verdicts, write_verdicts

__all__ = ["Param", "Rule", "Series", "Status", "Verdict", "read_verdicts", "write_verdicts"]
