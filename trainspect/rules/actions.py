"""Actions run when a rule finds issues: stop the training, call a function, log, or POST a webhook.

Actions subscribe to verdicts: the engine and the live runner call :meth:`Action.fire` with the verdict
once per rule, when it first reports ``IssuesFound``. :class:`StopTraining` does nothing by itself; the
live runner sees it and makes :meth:`~trainspect.rules.live.LiveRuleRunner.pending_stop` return a
:class:`~trainspect.exceptions.TrainingStopped` for the hook to raise at the next step boundary.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

from trainspect.exceptions import ConfigError
from trainspect.rules.verdict import Verdict

__all__ = [
    "Action",
    "StopTraining",
    "Callback",
    "LogAction",
    "Webhook",
    "parse_actions",
    "finish_webhooks",
    "ACTION_NAMES",
]

_log = logging.getLogger(__name__)


class Action:
    """Base class: something to do when a rule finds issues."""

    name: ClassVar[str] = "Action"

    def fire(self, verdict: Verdict) -> None:
        """React to a verdict whose status is ``IssuesFound`` (must not block; must not raise)."""

    def to_dict(self) -> dict[str, Any]:
        """Describe the action for configs and reports."""
        return {"name": self.name}

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class StopTraining(Action):
    """Stop the training at the next step boundary (live evaluation only; offline it is a no-op).

    Example:
        >>> StopTraining().to_dict()
        {'name': 'StopTraining'}
    """

    name = "StopTraining"


class Callback(Action):
    """Call ``fn(verdict)`` (on the rules thread; exceptions are logged, never raised).

    Args:
        fn: the function to call.
    """

    name = "callback"

    def __init__(self, fn: Callable[[Verdict], Any]) -> None:
        if not callable(fn):
            raise ConfigError(f"callback action: {fn!r} is not callable")
        self.fn = fn

    def fire(self, verdict: Verdict) -> None:
        """Call the function."""
        try:
            self.fn(verdict)
        except Exception:
            _log.warning("rule action callback %r failed", self.fn, exc_info=True)

    def __repr__(self) -> str:
        return f"Callback({self.fn!r})"


class LogAction(Action):
    """Write one log line (logger ``trainspect.rules.actions``) with the verdict's message.

    Args:
        level: the logging level name or number.
    """

    name = "log"

    def __init__(self, level: str | int = "WARNING") -> None:
        self.level = logging.getLevelName(level.upper()) if isinstance(level, str) else int(level)
        if not isinstance(self.level, int):
            raise ConfigError(f"log action: level={level!r} is no logging level; use DEBUG, INFO, WARNING or ERROR")

    def fire(self, verdict: Verdict) -> None:
        """Log the verdict."""
        _log.log(self.level, "rule %s found issues: %s", verdict.rule, verdict.message)

    def to_dict(self) -> dict[str, Any]:
        """Name and level."""
        return {"name": self.name, "level": logging.getLevelName(self.level)}


class Webhook(Action):
    """POST the verdict as JSON to ``url`` on a background thread (never blocks training).

    At close, :func:`finish_webhooks` waits for the POSTs in flight for at most a shared budget (2 s by default,
    for all webhooks together), then logs one line naming what was not delivered.

    Args:
        url: an ``http://`` or ``https://`` URL.
        timeout: seconds before a request is abandoned by its thread.

    Example:
        >>> Webhook("http://127.0.0.1:9/hook").to_dict()["url"]
        'http://127.0.0.1:9/hook'
    """

    name = "webhook"

    def __init__(self, url: str, timeout: float = 5.0) -> None:
        if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")):
            raise ConfigError(f"webhook action: url={url!r} must start with http:// or https://")
        self.url = url
        self.timeout = float(timeout)
        self._threads: list[tuple[threading.Thread, str]] = []
        self._lock = threading.Lock()

    def fire(self, verdict: Verdict) -> None:
        """Start the POST on a daemon thread and return at once."""
        body = json.dumps(verdict.to_dict()).encode("utf-8")
        thread = threading.Thread(target=self._post, args=(body,), name="trainspect-webhook", daemon=True)
        with self._lock:
            self._threads = [(t, r) for t, r in self._threads if t.is_alive()] + [(thread, verdict.rule)]
        thread.start()

    def _post(self, body: bytes) -> None:
        request = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - user URL
                response.read()
        except Exception as exc:
            _log.warning("rule webhook POST to %s failed: %s", self.url, exc)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the POSTs in flight, at most ``timeout`` seconds in all; return whether none is left."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            threads = [t for t, _ in self._threads]
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self.pending()

    def pending(self) -> list[str]:
        """The rules whose POST is still in flight (and not yet given up)."""
        with self._lock:
            return [rule for thread, rule in self._threads if thread.is_alive()]

    def give_up(self) -> list[str]:
        """Stop waiting for the POSTs in flight (their daemon threads end with the process); return their rules."""
        with self._lock:
            lost = [rule for thread, rule in self._threads if thread.is_alive()]
            self._threads = []
        return lost

    def to_dict(self) -> dict[str, Any]:
        """Name, URL and timeout."""
        return {"name": self.name, "url": self.url, "timeout": self.timeout}

    def __repr__(self) -> str:
        return f"Webhook({self.url!r})"


CLOSE_BUDGET_S = 2.0
"""Seconds that closing waits, for all webhooks together, before giving up on the POSTs still in flight."""


def finish_webhooks(actions: Iterable[Action], budget: float = CLOSE_BUDGET_S, when: str = "at close") -> list[str]:
    """Wait for the webhooks' POSTs in flight, ``budget`` seconds at most in all, and say what was not delivered.

    Used when the live rules close and before an offline :func:`~trainspect.rules.evaluate` returns (a script
    that exits right after it would otherwise drop the POSTs with their daemon threads); ``when`` ends the warning.

    Returns:
        One ``"<rule> -> <url>"`` entry per POST still in flight (also logged as one warning line).
    """
    deadline = time.monotonic() + max(0.0, budget)
    hooks = list(dict.fromkeys(a for a in actions if isinstance(a, Webhook)))
    for hook in hooks:
        hook.wait(max(0.0, deadline - time.monotonic()))
    lost = [f"{rule} -> {hook.url}" for hook in hooks for rule in hook.give_up()]
    if lost:
        _log.warning(
            "trainspect: %d webhook POST(s) not delivered within %.1f s %s: %s",
            len(lost),
            budget,
            when,
            "; ".join(lost),
        )
    return lost


ACTION_NAMES = ("StopTraining", "log", "webhook", "callback")


def parse_actions(spec: Any) -> list[Action]:
    """Turn an action spec into actions: None, a name, a JSON string, a dict, a callable, an Action, or a list.

    Names are case-insensitive (``"stoptraining"`` as smdebug's lower-cased action strings). Dicts carry
    ``name`` plus the action's keys (``{"name": "webhook", "url": ...}``).

    Raises:
        ConfigError: an unknown name or missing key; the message lists the valid names.

    Example:
        >>> parse_actions(["StopTraining", {"name": "log", "level": "info"}])
        [StopTraining(), LogAction()]
    """
    if spec is None:
        return []
    if isinstance(spec, str):
        text = spec.strip()
        if text.startswith(("[", "{")):
            return parse_actions(json.loads(text))
        return [_from_dict({"name": text})]
    if isinstance(spec, Action):
        return [spec]
    if isinstance(spec, dict):
        return [_from_dict(spec)]
    if callable(spec):
        return [Callback(spec)]
    if isinstance(spec, (list, tuple)):
        return [action for item in spec for action in parse_actions(item)]
    raise ConfigError(f"actions: {spec!r} is not an action; use one of {', '.join(ACTION_NAMES)}")


def _from_dict(entry: dict[str, Any]) -> Action:
    keys = {str(k).lower(): v for k, v in entry.items()}
    name = str(keys.pop("name", "")).strip().lower().replace("_", "")
    try:
        if name == "stoptraining":
            return StopTraining()
        if name == "log":
            return LogAction(keys.get("level", "WARNING"))
        if name == "webhook":
            return Webhook(keys["url"], float(keys.get("timeout", 5.0)))
        if name == "callback" and "fn" in keys:
            return Callback(keys["fn"])
    except KeyError as exc:
        raise ConfigError(f"action {name}: missing key {exc}") from None
    raise ConfigError(f"actions: unknown action {entry.get('name')!r}; allowed: {', '.join(ACTION_NAMES)}")
