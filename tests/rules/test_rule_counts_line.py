"""The one count line every screen shows: each number in it, singular and plural, the groups it names."""

from __future__ import annotations

from trainspect.rules.counts import RuleCounts, steps_text
from trainspect.rules.verdict import Status, Verdict


def _v(rule: str, status: Status, message: str = "") -> Verdict:
    return Verdict(rule, status, message=message)


def test_every_count_of_the_line() -> None:
    counts = RuleCounts.of(
        [
            _v("A", Status.NO_ISSUES_FOUND),
            _v("A", Status.ISSUES_FOUND),  # a rule met twice counts once: its last verdict
            _v("B", Status.NO_ISSUES_FOUND),
            _v("C", Status.IN_PROGRESS),
            _v("D", Status.NO_DATA, "no GPU: this rule needs GPU utilisation"),
            _v("E", Status.NO_DATA, "no GPU: this rule needs GPU utilisation"),
            _v("F", Status.ERROR, "boom"),
        ]
    )
    assert counts.total == 6 and counts.judged == ("A", "B", "C") and counts.issues == ("A",)
    assert counts.line() == (
        "6 rules: 3 judged, 1 found issues (A), 2 could not look (D, E: needs GPU utilisation), 1 failed (F) "
        "(verdicts in progress: the run is still going)"
    )
    doc = counts.to_dict()
    assert (doc["total"], doc["judged"], doc["issues"], doc["no_data"], doc["errors"]) == (6, 3, 1, 2, 1)
    assert doc["no_data_rules"] == [
        {"rule": "D", "needs": "needs GPU utilisation"},
        {"rule": "E", "needs": "needs GPU utilisation"},
    ]


def test_one_rule_is_singular_and_nothing_judged_is_said() -> None:
    assert RuleCounts.of([_v("A", Status.NO_ISSUES_FOUND)]).line() == "1 rule: 1 judged, 0 found issues"
    assert RuleCounts.of([]).line() == "0 rules: 0 judged, 0 found issues" and RuleCounts.of([]).total == 0


def test_could_not_look_groups_by_need_and_counts_the_rest() -> None:
    verdicts = [_v(f"R{i}", Status.NO_DATA, f"no data: this rule needs thing {i}") for i in range(5)]
    counts = RuleCounts.of(verdicts)
    assert counts.no_data_text() == "R0: needs thing 0; R1: needs thing 1; R2: needs thing 2; 2 more"
    assert counts.no_data_text(limit=4).endswith("R3: needs thing 3; 1 more")
    assert counts.no_data_text(limit=5).endswith("R4: needs thing 4")
    assert counts.line().startswith("5 rules: 0 judged, 0 found issues, 5 could not look (R0: needs thing 0;")


def test_steps_text_separates_thousands() -> None:
    assert steps_text({"TRAIN": 12345, "EVAL": 3}) == "12,345 TRAIN, 3 EVAL steps" and steps_text({}) == "no steps"


def test_steps_per_mode_of_a_trial() -> None:
    from trainspect.modes import ModeKeys
    from trainspect.rules.counts import step_counts

    class Trial:
        def __init__(self, by_mode: dict[ModeKeys, list[int]]) -> None:
            self.by_mode = by_mode

        def steps(self, mode: ModeKeys) -> list[int]:
            return self.by_mode.get(mode, [])

    assert step_counts(Trial({ModeKeys.TRAIN: [0, 1, 2], ModeKeys.EVAL: [3], ModeKeys.GLOBAL: [4]})) == {
        "TRAIN": 3,
        "EVAL": 1,
    }
    assert step_counts(Trial({ModeKeys.GLOBAL: [0, 1]})) == {"GLOBAL": 2} and step_counts(Trial({})) == {}
