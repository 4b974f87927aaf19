"""One plugin loader for rules, report sections and TensorBoard cards: a broken plugin warns once and is skipped."""

from __future__ import annotations

import warnings
from importlib import metadata
from typing import Any

import pytest

from trainspect._entry_points import load_entry_points


class _EP:
    def __init__(self, name: str, obj: Any = None, error: Exception | None = None) -> None:
        self.name, self.obj, self.error = name, obj, error

    def load(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.obj


def _patch(monkeypatch: pytest.MonkeyPatch, eps: list[_EP]) -> list[str]:
    groups: list[str] = []

    def entry_points(group: str) -> list[_EP]:
        groups.append(group)
        return eps

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    return groups


def _loading(fn: Any) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]


def test_a_broken_plugin_warns_once_naming_it_and_the_others_load(monkeypatch: pytest.MonkeyPatch) -> None:
    groups = _patch(monkeypatch, [_EP("broken", error=ImportError("no module x")), _EP("good", 1), _EP("bad", 2)])
    got: list[Any] = []

    def register(obj: Any) -> None:
        if obj == 2:
            raise ValueError("id taken")
        got.append(obj)

    loaded: list[str] = []
    messages = _loading(lambda: loaded.extend(load_entry_points("g", register, "widget")))
    assert groups == ["g"] and got == [1] and loaded == ["good"]
    assert len(messages) == 2
    assert "widget plugin 'broken' (g)" in messages[0] and "ImportError: no module x" in messages[0]
    assert "widget plugin 'bad' (g)" in messages[1] and "ValueError: id taken" in messages[1]


def test_a_group_that_cannot_be_listed_warns_and_loads_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def entry_points(group: str) -> list[_EP]:
        raise RuntimeError("bad metadata")

    monkeypatch.setattr(metadata, "entry_points", entry_points)
    messages = _loading(lambda: load_entry_points("g", lambda obj: None, "widget"))
    assert len(messages) == 1 and "could not list the widget plugins of g" in messages[0]


def test_rules_sections_and_cards_share_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainspect.report.sections import Section, SectionRegistry
    from trainspect.rules.registry import RuleRegistry
    from trainspect.rules.tensor_rule import TensorRule

    class PluginRule(TensorRule):
        def check(self, state: Any, data: Any) -> None:
            return None

    class PluginSection(Section):
        id, title = "plugin", "Plugin"

        def build(self, ctx: Any, page: Any) -> None:
            page.p("hi")

    broken = _EP("broken", error=ImportError("gone"))
    _patch(monkeypatch, [broken, _EP("rule", [PluginRule]), _EP("section", PluginSection)])
    rules, sections = RuleRegistry(), SectionRegistry()
    r_msgs = _loading(rules.load_entry_points)
    s_msgs = _loading(sections.load_entry_points)
    assert "PluginRule" in rules and [s.id for s in sections.sections()] == ["plugin"]
    assert any("rule plugin 'broken'" in m for m in r_msgs) and any("section plugin 'broken'" in m for m in s_msgs)
    assert sum("'broken'" in m for m in r_msgs) == 1 and sum("'broken'" in m for m in s_msgs) == 1

    pytest.importorskip("tensorboard")
    from trainspect.tb_plugin.cards import Card, CardRegistry

    _patch(monkeypatch, [broken, _EP("card", lambda: Card("extra", "Extra", lambda data: []))])
    cards = CardRegistry()
    c_msgs = _loading(cards.load_entry_points)
    assert [c.id for c in cards.cards()] == ["extra"]
    assert len(c_msgs) == 1 and "card plugin 'broken'" in c_msgs[0] and "ImportError: gone" in c_msgs[0]
