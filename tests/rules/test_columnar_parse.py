"""Issue 30: index records of the writer's own layout are parsed in bulk; the result is the JSON parser's.

Every record the bulk parse takes must give the columns the per-record JSON reading gives, and every record it
leaves (other layouts, damaged or foreign records) must still be read, skipped and reported one by one as before.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from trainspect.store import source as source_mod
from trainspect.store.index_batch import BatchBuilder, IndexBatch
from trainspect.store.quick_scan import Layout, parse_layout
from trainspect.store.source import TrainspectSource


def _rec(g: int, value: str = "0.5", *, mode: str = "1", extra: str = "", dtype: str = "<f4", shape: str = "") -> bytes:
    entry = f'{{"n":"loss","v":{value},"d":"{dtype}","s":[{shape}]}}'
    return (f'{{"g":{g},"m":{mode},"ms":{g},"t":{1000 + g / 8},"f":"data-000000.bin","e":[{entry}{extra}]}}').encode()


ODD = [
    _rec(1, '"NaN"'),
    _rec(2, '"Infinity"'),
    _rec(3, '"-Infinity"'),
    _rec(4, "1e-3"),
    _rec(5, "-0.0"),
    _rec(6, "2"),
    _rec(7, '"nan"'),
    _rec(8, "0.5", mode="9"),
    _rec(9, dtype="<i8"),
    _rec(10, shape="1,1"),
    _rec(11, shape="2"),
    _rec(12, extra=',{"n":"acc","v":0.25,"d":"<f8","s":[]}'),
    _rec(13).replace(b":", b": ", 1),
    _rec(14).replace(b"loss", b"lo\\u0073s"),
    _rec(15).replace(b"loss", "löss".encode()),
    _rec(16).replace(b"loss", b"l\xffss"),
    b'{"g":17,"m":1}',
    b"not json",
    b'{"g":18,"m":1,"ms":1,"t":1,"f":"x","e":[]}',
    _rec(19, extra=',{"n":"w","o":0,"l":4,"d":"<f4","s":[1]}'),
    _rec(20, "NaN"),
    b'{"g":21}' + b"\n",
    _rec(22).replace(b'"t":1002.75', b'"t":"soon"'),
    _rec(-3),
]


def _one_by_one(payloads: list[bytes]) -> Layout:
    """A parse that takes no record (everything goes to the JSON parser)."""
    lay = parse_layout([b"{}"] * len(payloads))
    assert not lay.ok.any()
    return lay


def _read(
    tmp_path: Path, payloads: list[bytes], bulk: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[IndexBatch | None, list[str]]:
    folder = tmp_path / "tensors" / "worker_0"
    folder.mkdir(parents=True, exist_ok=True)
    src = TrainspectSource(tmp_path)
    with monkeypatch.context() as m:
        if not bulk:
            m.setattr(source_mod, "parse_layout", _one_by_one)
        batch = BatchBuilder("worker_0")
        src._add_records(batch, folder / "index-000000.idx", folder, payloads)
        src._flush()
    return batch.build(), list(src.problems)


def _same(a: IndexBatch | None, b: IndexBatch | None) -> None:
    assert (a is None) == (b is None)
    if a is None or b is None:
        return
    for key in ("steps", "modes", "mode_steps", "walls", "entry_rec", "entry_name", "entry_obj"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)
    np.testing.assert_array_equal(a.values.view(np.int64), b.values.view(np.int64))  # bit for bit (NaN too)
    assert [a.dtypes[i] for i in a.entry_dtype[a.entry_obj < 0]] == [
        b.dtypes[i] for i in b.entry_dtype[b.entry_obj < 0]
    ]
    assert [a.shapes[i] for i in a.entry_shape[a.entry_obj < 0]] == [
        b.shapes[i] for i in b.entry_shape[b.entry_obj < 0]
    ]
    assert a.names == b.names and a.objects == b.objects
    assert repr(a.entries()) == repr(b.entries()) and a.rows() == b.rows()  # (repr: NaN is not == NaN)


@pytest.mark.parametrize("seed", range(12))
def test_bulk_parse_reads_what_the_json_parser_reads(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(seed)
    plain = [_rec(100 + i, repr(float(v))) for i, v in enumerate(rng.standard_normal(40))]
    odd = [ODD[i] for i in rng.choice(len(ODD), size=int(rng.integers(0, 8)), replace=False)]
    payloads = plain + odd
    order = rng.permutation(len(payloads)) if seed % 3 else np.arange(len(payloads))
    payloads = [payloads[i] for i in order]
    fast, fast_problems = _read(tmp_path, payloads, True, monkeypatch)
    slow, slow_problems = _read(tmp_path, payloads, False, monkeypatch)
    _same(fast, slow)
    assert fast_problems == slow_problems


def test_each_odd_record_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for rec in ODD:
        fast, fast_problems = _read(tmp_path, [_rec(0), rec, _rec(50)], True, monkeypatch)
        slow, slow_problems = _read(tmp_path, [_rec(0), rec, _rec(50)], False, monkeypatch)
        _same(fast, slow)
        assert fast_problems == slow_problems, rec


def test_the_writers_records_are_taken_and_odd_ones_left() -> None:
    lay = parse_layout([_rec(1), _rec(2, '"NaN"'), _rec(3, "2"), _rec(4, mode="9"), _rec(5, dtype="<i4")])
    assert lay.ok.tolist() == [True, True, False, False, False]
    assert lay.runs() == [(0, 2, True), (2, 5, False)]
    assert lay.steps[:2].tolist() == [1, 2] and lay.entry_start.tolist() == [0, 1, 2, 2, 2, 2]


def test_a_record_holding_a_newline_is_not_read_as_two_lines() -> None:
    # one payload holding two record texts on two lines, and one that is no record: joined with newlines they make
    # as many matching lines as payloads; the line scan must not be trusted then (each is judged alone)
    lay = parse_layout([_rec(1) + b"\n" + _rec(2), b"garbage"])
    assert lay.ok.tolist() == [False, False]
    lay = parse_layout([_rec(1) + b"\n" + _rec(2, extra=',{"n":"acc","v":0.25,"d":"<f8","s":[]}'), b"garbage"])
    assert lay.ok.tolist() == [False, False]


def test_a_missing_data_file_is_named_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        _, problems = _read(tmp_path, [_rec(1), _rec(2)], True, monkeypatch)
    assert len(problems) == 1 and "data-000000.bin: it is missing" in problems[0]
