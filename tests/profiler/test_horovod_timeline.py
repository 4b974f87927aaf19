"""The Horovod timeline reader against real timelines (tests/data/horovod) and damaged copies of them.

The expected counts were read off the files by hand (grep for ``"ph": "B"``, the ``X`` markers, the ``args`` of the
closing ``E`` events); see tests/data/horovod/README.md for how the files were recorded.
"""

from __future__ import annotations

import doctest
import json
import logging
import math
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trainspect.profiler import horovod
from trainspect.profiler.horovod import (
    LAST_READY_COLUMNS,
    NEGOTIATION_COLUMNS,
    PHASE_COLUMNS,
    READY_COLUMNS,
    SPAN_COLUMNS,
    TENSOR_COLUMNS,
    last_ready_counts,
    negotiations,
    phase_totals,
    read_horovod_timeline,
    tensor_totals,
)

DATA = Path(__file__).resolve().parent.parent / "data" / "horovod"
TIMELINE = DATA / "timeline.json"
NOCACHE = DATA / "timeline_nocache.json"
START_S = 1796121268.498029  # start_time_since_epoch_in_micros of timeline.json, in seconds
TENSORS = {
    "broadcast.0.bias",
    "broadcast.0.weight",
    "broadcast.2.bias",
    "broadcast.2.weight",
    "allreduce.2.bias",
    "allreduce.2.weight",
    "allreduce.0.bias",
    "allreduce.0.weight",
    "allreduce.loss_avg",
    "allgather.wsum",
}
B_NAMES = {
    "NEGOTIATE_ALLREDUCE": 25,
    "ALLREDUCE": 25,
    "GLOO_ALLREDUCE": 25,
    "MEMCPY_IN_FUSION_BUFFER": 20,
    "MEMCPY_OUT_FUSION_BUFFER": 20,
    "NEGOTIATE_BROADCAST": 4,
    "BROADCAST": 4,
    "GLOO_BCAST": 4,
    "INIT_FUSION_BUFFER": 4,
    "NEGOTIATE_ALLGATHER": 1,
    "ALLGATHER": 1,
    "ALLOCATE_OUTPUT": 1,
    "GLOO_ALLGATHER": 1,
}


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name == horovod.__name__]


def _write(tmp_path: Path, text: str | bytes, name: str = "timeline.json") -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def _events(events: list[dict]) -> str:
    return "[\n" + ",".join(json.dumps(e) for e in events) + "]"


# --- the real timeline ---------------------------------------------------------------------------------------------


def test_real_timeline_spans_markers_and_clock(caplog: pytest.LogCaptureFixture) -> None:
    tl = read_horovod_timeline(TIMELINE)
    assert _warnings(caplog) == []
    assert (tl.complete, tl.skipped, tl.unreadable, tl.cut_off, tl.problem, tl.cycle_marks) == (
        True,
        0,
        0,
        False,
        None,
        0,
    )
    assert tl.start_time_s == pytest.approx(START_S, abs=1e-6)
    assert list(tl.spans.columns) == SPAN_COLUMNS and list(tl.ready.columns) == READY_COLUMNS
    assert len(tl.spans) == 135 and tl.spans["end_s"].notna().all()
    assert tl.spans["name"].value_counts().to_dict() == B_NAMES
    assert tl.spans["kind"].value_counts().to_dict() == {"negotiate": 30, "operation": 30, "activity": 75}
    assert set(tl.spans["tensor"]) == TENSORS
    first = tl.spans.iloc[0]  # {"ph": "B", "name": "NEGOTIATE_BROADCAST", "ts": 6340185, "pid": 1} .. E at 6402731
    assert (first["tensor"], first["call"], first["kind"], first["operation"]) == (
        "broadcast.0.bias",
        0,
        "negotiate",
        "BROADCAST",
    )
    assert first["start_s"] == pytest.approx(START_S + 6.340185, abs=1e-6)
    assert first["duration_s"] == pytest.approx(62546e-6, abs=1e-7)
    gather = tl.spans[(tl.spans["tensor"] == "allgather.wsum") & (tl.spans["name"] == "GLOO_ALLGATHER")].iloc[0]
    assert (gather["kind"], gather["operation"]) == ("activity", "ALLGATHER")
    assert gather["duration_s"] == pytest.approx((7078050 - 7076695) * 1e-6, abs=1e-7)


def test_real_timeline_dtype_and_shape_from_the_closing_event() -> None:
    spans = read_horovod_timeline(TIMELINE).spans
    with_shape = spans[spans["shape"].notna()]
    assert (
        len(with_shape) == 26 and set(with_shape["kind"]) == {"operation"} and set(with_shape["dtype"]) == {"float32"}
    )
    by_tensor = with_shape.groupby("tensor")["shape"].agg(set).to_dict()
    assert by_tensor == {
        "allreduce.2.bias": {"[1]"},
        "allreduce.2.weight": {"[1, 16]"},
        "allreduce.0.bias": {"[16]"},
        "allreduce.0.weight": {"[16, 8]"},
        "allreduce.loss_avg": {"[]"},
        "allgather.wsum": {"[2]"},
    }
    assert spans[spans["name"] == "BROADCAST"]["shape"].isna().all()  # Horovod gave no args for them


def test_real_timeline_calls_pair_each_negotiation_with_its_operation() -> None:
    spans = read_horovod_timeline(TIMELINE).spans
    w = spans[spans["tensor"] == "allreduce.0.weight"]
    assert sorted(set(w["call"])) == [0, 1, 2, 3, 4]
    for _, call in w.groupby("call"):
        assert call["kind"].tolist()[:2] == ["negotiate", "operation"]
        assert call["start_s"].is_monotonic_increasing


def test_real_timeline_readiness_and_the_last_rank() -> None:
    tl = read_horovod_timeline(TIMELINE)
    assert len(tl.ready) == 20 and tl.ready["rank"].value_counts().to_dict() == {0: 10, 1: 10}
    assert set(tl.ready["call"]) == {0} and set(tl.ready["cycle"]) == {-1}  # the cache: markers on first calls only
    neg = negotiations(tl.ready)
    assert list(neg.columns) == NEGOTIATION_COLUMNS and len(neg) == 10 and (neg["ranks"] == 2).all()
    row = neg[neg["tensor"] == "broadcast.0.bias"].iloc[0]  # X "0" at 6340186, X "1" at 6402730
    assert (row["first_rank"], row["last_rank"], bool(row["clear"])) == (0, 1, False)  # may be one cycle: 0 then 1
    assert row["wait_s"] == pytest.approx(62544e-6, abs=1e-6)  # epoch-second floats: sub-µs rounding
    grad = neg[neg["tensor"].str.startswith("allreduce.") & (neg["tensor"] != "allreduce.loss_avg")]
    assert (grad["last_rank"] == 0).all() and grad["clear"].all()  # "1" then "0": rank 0 came a cycle later
    counts = last_ready_counts(tl.ready)
    assert list(counts.columns) == LAST_READY_COLUMNS
    assert counts.to_dict("records") == [
        {"rank": 0, "last": 4, "last_unclear": 0, "negotiations": 10, "last_percent": 40.0},
        {"rank": 1, "last": 0, "last_unclear": 6, "negotiations": 10, "last_percent": 0.0},
    ]


def test_real_timeline_without_the_cache_has_markers_on_every_call() -> None:
    tl = read_horovod_timeline(NOCACHE)
    assert (len(tl.spans), len(tl.ready), tl.problem) == (130, 60, None)
    neg = negotiations(tl.ready)
    assert len(neg) == 30 and (neg["ranks"] == 2).all()
    assert neg[neg["tensor"] == "allreduce.0.weight"]["call"].tolist() == [0, 1, 2, 3, 4]
    counts = last_ready_counts(tl.ready, world_size=2)
    assert counts[["rank", "last", "last_unclear", "negotiations"]].values.tolist() == [[0, 5, 0, 30], [1, 0, 25, 30]]
    wsum = tl.spans[tl.spans["tensor"] == "allgather.wsum"]
    assert wsum["name"].tolist() == ["NEGOTIATE_ALLGATHER"]  # the operation itself was never written (shutdown)


def test_phase_and_tensor_totals_of_the_real_timeline() -> None:
    spans = read_horovod_timeline(TIMELINE).spans
    phases = phase_totals(spans)
    assert list(phases.columns) == PHASE_COLUMNS
    assert dict(zip(phases["name"], phases["count"], strict=True)) == B_NAMES
    assert (phases["open"] == 0).all() and phases["total_s"].is_monotonic_decreasing
    gloo = phases[phases["name"] == "GLOO_ALLREDUCE"].iloc[0]
    durations = spans[spans["name"] == "GLOO_ALLREDUCE"]["duration_s"]
    assert gloo["total_s"] == pytest.approx(durations.sum()) and gloo["max_s"] == pytest.approx(durations.max())
    per = phase_totals(spans, per_tensor=True)
    assert list(per.columns) == ["tensor", *PHASE_COLUMNS] and per["count"].sum() == 135
    tensors = tensor_totals(spans)
    assert list(tensors.columns) == TENSOR_COLUMNS and set(tensors["tensor"]) == TENSORS
    w = tensors.set_index("tensor").loc["allreduce.0.weight"]
    assert (w["operation"], w["calls"], w["dtype"], w["shape"]) == ("ALLREDUCE", 5, "float32", "[16, 8]")
    ops = spans[(spans["tensor"] == "allreduce.0.weight") & (spans["kind"] == "operation")]["duration_s"].sum()
    assert w["operation_s"] == pytest.approx(ops)
    assert tensors.set_index("tensor").loc["broadcast.0.bias", "calls"] == 1
    total = (tensors["negotiate_s"] + tensors["operation_s"]).to_numpy()
    assert (np.diff(total) <= 0).all()


def test_small_chunks_read_the_same_tables() -> None:
    whole = read_horovod_timeline(TIMELINE)
    tiny = read_horovod_timeline(TIMELINE, chunk_bytes=7)
    pd.testing.assert_frame_equal(whole.spans, tiny.spans)
    pd.testing.assert_frame_equal(whole.ready, tiny.ready)
    assert tiny.problem is None and tiny.complete


# --- a running job, damaged and foreign files ----------------------------------------------------------------------


def test_unterminated_array_is_read_whole_without_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    text = TIMELINE.read_text()
    assert text.endswith("]")
    whole = read_horovod_timeline(TIMELINE)
    for variant in (text[:-1], text[:-1] + ",\n"):  # a running job's file; an older Horovod's (trailing comma)
        tl = read_horovod_timeline(_write(tmp_path, variant))
        assert (tl.complete, tl.problem) == (False, None)
        pd.testing.assert_frame_equal(tl.spans, whole.spans)
        pd.testing.assert_frame_equal(tl.ready, whole.ready)
    assert _warnings(caplog) == []


def test_cut_off_last_event_is_skipped_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    text = TIMELINE.read_text()
    last = text.rindex('{"ph": "E"')  # the ALLGATHER's closing event, with its args
    tl = read_horovod_timeline(_write(tmp_path, text[: last + 45]))  # cut inside its "args"
    assert (tl.cut_off, tl.complete, tl.unreadable, tl.skipped) == (True, False, 0, 0)
    assert len(tl.spans) == 135 and tl.spans["end_s"].isna().sum() == 1
    still_open = tl.spans[tl.spans["end_s"].isna()].iloc[0]
    assert (still_open["tensor"], still_open["name"]) == ("allgather.wsum", "ALLGATHER")
    assert phase_totals(tl.spans).set_index("name").loc["ALLGATHER", ["count", "open"]].tolist() == [0, 1]
    assert _warnings(caplog) == [
        f"trainspect: Horovod timeline {tmp_path / 'timeline.json'}: skipped the last event, cut off"
    ]


def test_every_prefix_of_a_growing_file_reads(tmp_path: Path) -> None:
    data = TIMELINE.read_bytes()
    whole = read_horovod_timeline(TIMELINE).spans
    seen = 0
    for cut in range(0, len(data), 89):
        tl = read_horovod_timeline(_write(tmp_path, data[:cut]))
        assert tl.unreadable == 0 and tl.skipped == 0 and tl.problem in (None, CUT_OFF)
        assert len(tl.spans) >= seen
        seen = len(tl.spans)
        closed = tl.spans["end_s"].notna().to_numpy()
        pd.testing.assert_frame_equal(
            tl.spans[closed].reset_index(drop=True), whole[: len(tl.spans)][closed].reset_index(drop=True)
        )


def test_garbage_between_events_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    text = TIMELINE.read_text()
    at = text.index('{"ph": "B", "name": "BROADCAST"')
    tl = read_horovod_timeline(_write(tmp_path, text[:at] + "\x00\x01 not json }} ]]" + text[at:]))
    assert len(tl.spans) == 135 and tl.unreadable == 1 and not tl.cut_off
    assert len(_warnings(caplog)) == 1 and "1 unreadable stretch" in _warnings(caplog)[0]


def test_bad_records_are_counted_and_skipped(tmp_path: Path) -> None:
    events = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "allreduce.w"}},
        {"ph": "B", "name": "ALLREDUCE", "ts": "soon", "pid": 1},  # ts not a number
        {"ph": "B", "name": "ALLREDUCE", "ts": 10},  # no pid
        {"ph": "E", "ts": 11, "pid": 2},  # no open span
        {"ph": "X", "name": "rank zero", "ts": 12, "pid": 1, "dur": 0},  # not a rank
        {"ph": "M", "pid": 3, "args": "oops"},
        {"ph": "Q", "ts": 1, "pid": 1},  # unknown phase
        {"ph": "X", "name": "\u00b2", "ts": 12, "pid": 1, "dur": 0},  # a digit, but not a rank
        {"ph": "X", "name": "12345678901234567890", "ts": 12, "pid": 1, "dur": 0},  # no rank either
        {"ph": "B", "name": "ALLREDUCE", "ts": 5, "pid": 2**70},  # pid past int64
        {"ph": "B", "name": "ALLREDUCE", "ts": 10**400, "pid": 1},  # ts past the float range
        {"ph": "B", "name": "ALLREDUCE", "ts": float("nan"), "pid": 1},  # written as NaN
        {"ph": "B", "name": "ALLREDUCE", "ts": 5, "pid": True},
        [1, 2],
        "text",
        {"ph": "B", "name": "ALLREDUCE", "ts": 20, "pid": 1},
        {"ph": "E", "ts": 25, "pid": 1, "args": {"dtype": 7, "shape": "[3]"}},
        {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": 30, "pid": 9},  # a pid with no name
        {"ph": "X", "name": "1", "ts": 31, "pid": 9, "dur": 0},
    ]
    tl = read_horovod_timeline(_write(tmp_path, _events(events)))
    assert tl.skipped == 14 and tl.unreadable == 0
    first = tl.spans.iloc[0]
    assert (first["tensor"], first["kind"], first["shape"]) == ("allreduce.w", "operation", "[3]")
    assert first["duration_s"] == pytest.approx(5e-6) and first["dtype"] is None  # dtype 7: not text
    assert tl.spans["tensor"].tolist() == ["allreduce.w", "<pid 9>"]
    assert math.isnan(tl.spans["end_s"].iloc[1])
    assert tl.ready[["tensor", "call", "rank"]].values.tolist() == [["<pid 9>", 0, 1]]


NOT_A_TIMELINE = "not a Horovod timeline: no record could be understood"
CUT_OFF = "skipped the last event, cut off"


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40, NOT_A_TIMELINE),
        (b"hello, world\n" * 100, NOT_A_TIMELINE),
        (b"[" * 100_000, NOT_A_TIMELINE),
        (b'[{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]", NOT_A_TIMELINE),
        (b'{"traceEvents": []}', NOT_A_TIMELINE),
        (b'[1, "two", [3]]', NOT_A_TIMELINE),
        (b'{"a": [1, 2', CUT_OFF),
    ],
    ids=["binary", "text", "deep-nesting", "deep-record", "other-trace-format", "not-objects", "cut-json"],
)
def test_a_file_that_is_no_timeline_gives_empty_tables(
    tmp_path: Path, content: bytes, problem: str, caplog: pytest.LogCaptureFixture
) -> None:
    tl = read_horovod_timeline(_write(tmp_path, content))
    assert tl.spans.empty and tl.ready.empty and list(tl.spans.columns) == SPAN_COLUMNS
    assert tl.problem == problem
    assert len(_warnings(caplog)) == 1
    for frame in (negotiations(tl.ready), last_ready_counts(tl.ready), phase_totals(tl.spans), tensor_totals(tl.spans)):
        assert frame.empty


def test_a_job_that_just_started_is_cut_off_not_foreign(tmp_path: Path) -> None:
    text = TIMELINE.read_text()
    at = text.index('"args": {"name": "broadcast.0.bias"}')  # inside the first tensor's process_name event
    tl = read_horovod_timeline(_write(tmp_path, text[: at + 20]))
    assert (tl.problem, tl.records, tl.start_time_s) == (CUT_OFF, 2, pytest.approx(START_S, abs=1e-6))


@pytest.mark.parametrize("content", ["", "   \n", "[", "[]", "[\n]\n"])
def test_an_empty_timeline(tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture) -> None:
    tl = read_horovod_timeline(_write(tmp_path, content))
    assert tl.spans.empty and tl.ready.empty and tl.problem is None and tl.start_time_s is None
    assert tl.complete == content.strip().endswith("]")
    assert list(negotiations(tl.ready).columns) == NEGOTIATION_COLUMNS
    assert list(last_ready_counts(tl.ready).columns) == LAST_READY_COLUMNS
    assert list(phase_totals(tl.spans).columns) == PHASE_COLUMNS
    assert list(tensor_totals(tl.spans).columns) == TENSOR_COLUMNS
    assert _warnings(caplog) == []


def test_a_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_horovod_timeline(tmp_path / "nope.json")


def test_bad_arguments_name_the_argument() -> None:
    with pytest.raises(ValueError, match="chunk_bytes=0"):
        read_horovod_timeline(TIMELINE, chunk_bytes=0)
    with pytest.raises(ValueError, match="world_size=0"):
        last_ready_counts(read_horovod_timeline(TIMELINE).ready, world_size=0)


# --- semantics on small synthetic timelines ------------------------------------------------------------------------


def _negotiation(pid: int, order: list[int], ts: int, marks_between: bool = False) -> list[dict]:
    out: list[dict] = [{"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "ts": ts, "pid": pid}]
    for i, rank in enumerate(order):
        if marks_between and i == len(order) - 1:
            out.append({"ph": "i", "name": "CYCLE_START", "ts": ts + i, "s": "g"})
        out.append({"ph": "X", "name": str(rank), "ts": ts + i + 1, "pid": pid, "dur": 0})
    return [*out, {"ph": "E", "ts": ts + 10, "pid": pid}]


def test_cycle_marks_tell_a_clear_last_rank(tmp_path: Path) -> None:
    events = [
        {"ph": "i", "name": "CYCLE_START", "ts": 0, "s": "g"},
        *_negotiation(1, [0, 1, 2], 100),  # one cycle, in rank order: no clear straggler
        *_negotiation(2, [0, 1, 2], 200, marks_between=True),  # rank 2 a cycle later: clear
        *_negotiation(3, [0, 2], 400),
    ]  # rank 1 missing (it joined): not counted
    tl = read_horovod_timeline(_write(tmp_path, _events(events)))
    assert tl.cycle_marks == 2
    assert tl.ready["cycle"].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
    neg = negotiations(tl.ready)
    assert neg[["last_rank", "ranks", "clear"]].values.tolist() == [[2, 3, False], [2, 3, True], [2, 2, False]]
    counts = last_ready_counts(tl.ready, world_size=3)
    assert counts[["rank", "last", "last_unclear", "negotiations"]].values.tolist() == [
        [2, 1, 1, 2],
        [0, 0, 0, 2],
        [1, 0, 0, 2],
    ]
    assert counts["last_percent"].tolist() == [50.0, 0.0, 0.0]


def test_without_cycle_marks_a_lower_rank_last_is_clear(tmp_path: Path) -> None:
    tl = read_horovod_timeline(
        _write(tmp_path, _events([*_negotiation(1, [1, 0], 100), *_negotiation(2, [0, 1], 200)]))
    )
    assert negotiations(tl.ready)["clear"].tolist() == [True, False]


def test_no_start_marker_keeps_relative_seconds(tmp_path: Path) -> None:
    events = [{"ph": "B", "name": "ALLREDUCE", "ts": 2_000_000, "pid": 1}, {"ph": "E", "ts": 2_500_000, "pid": 1}]
    tl = read_horovod_timeline(_write(tmp_path, _events(events)))
    assert tl.start_time_s is None
    assert tl.spans[["start_s", "end_s", "duration_s"]].values.tolist() == [[2.0, 2.5, 0.5]]


def test_a_multibyte_tensor_name_split_across_chunks(tmp_path: Path) -> None:
    events = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "allreduce.größe_µ"}},
        {"ph": "B", "name": "ALLREDUCE", "ts": 1, "pid": 1},
        {"ph": "E", "ts": 2, "pid": 1},
    ]
    path = _write(tmp_path, "[\n" + ",".join(json.dumps(e, ensure_ascii=False) for e in events) + "]")
    for chunk in (1, 2, 3, 5, 1 << 20):
        assert read_horovod_timeline(path, chunk_bytes=chunk).spans["tensor"].tolist() == ["allreduce.größe_µ"]


def test_memory_stays_bounded_on_a_large_file(tmp_path: Path) -> None:
    mark = '{"ph": "i", "name": "CYCLE_START", "ts": 123456789, "s": "g"},'
    path = tmp_path / "big.json"
    with path.open("w") as fh:
        fh.write("[\n")
        for _ in range(64):
            fh.write(mark * 1000 + "\n")
        fh.write(_events([{"ph": "B", "name": "ALLREDUCE", "ts": 1, "pid": 1}, {"ph": "E", "ts": 2, "pid": 1}])[2:])
    size = path.stat().st_size
    assert size > 3_500_000
    tracemalloc.start()
    try:
        tl = read_horovod_timeline(path, chunk_bytes=1 << 16)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert tl.cycle_marks == 64_000 and len(tl.spans) == 1
    assert peak < size / 4, f"peak {peak} bytes for a {size}-byte file"


def test_the_docstring_example_runs() -> None:
    assert doctest.testmod(horovod, raise_on_error=False).failed == 0


def test_random_damage_never_raises(tmp_path: Path) -> None:
    import random

    data = TIMELINE.read_bytes()
    rng = random.Random(27)
    path = tmp_path / "damaged.json"
    for _ in range(40):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 20)):
            at, choice = rng.randrange(len(damaged)), rng.random()
            if choice < 0.4:
                damaged[at] = rng.randrange(256)
            elif choice < 0.7:
                del damaged[at : at + rng.randint(1, 200)]
            else:
                damaged[at:at] = bytes(rng.choice(b'{}[],":0123456789XBEM\n') for _ in range(rng.randint(1, 20)))
        path.write_bytes(bytes(damaged))
        tl = read_horovod_timeline(path, chunk_bytes=rng.choice([13, 4096, 1 << 20]))
        assert len(tl.spans) <= 135 + 30 and list(tl.spans.columns) == SPAN_COLUMNS
        for frame in (
            negotiations(tl.ready),
            last_ready_counts(tl.ready),
            phase_totals(tl.spans),
            tensor_totals(tl.spans),
        ):
            assert isinstance(frame, pd.DataFrame)


def test_rank_zeros_hook_copies_the_timeline_into_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    import trainspect as ts

    source = tmp_path / "timeline.json"
    source.write_bytes((DATA / "timeline.json").read_bytes())
    monkeypatch.setenv("HOROVOD_TIMELINE", str(source))
    model = torch.nn.Linear(2, 1)
    with ts.torch.Hook(tmp_path / "run") as hook:
        hook.register_module(model)
        model(torch.ones(1, 2)).sum().backward()
    copied = tmp_path / "run" / "profiler" / "horovod" / "timeline.json"
    assert copied.read_bytes() == source.read_bytes()
    assert len(read_horovod_timeline(copied).spans) == 135
