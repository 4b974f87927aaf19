"""TensorBoard histograms: the hand-encoded events are protobuf's bytes, batched or not."""

from __future__ import annotations

import numpy as np
import pytest
from tensorboard.compat.proto import event_pb2

from trainspect.store.tb_writer import TensorBoardWriter, _histogram_event


def _arrays(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(60):
        x = rng.standard_normal(int(rng.integers(2, 80))) * 10.0 ** int(rng.integers(-30, 30))
        if i % 5 == 0:
            x[:] = x[0]
        if i % 7 == 0:
            x[0] = np.nan
        if i % 11 == 0:
            x[-1] = np.inf
        if i % 13 == 0:
            x = np.full(x.size, -0.0)
        with np.errstate(all="ignore"):
            out.append(x.astype([np.float32, np.float64, np.float16][i % 3]))
    out += [rng.integers(0, 9, 50), rng.standard_normal(20_000).astype(np.float32), np.zeros(0, np.float32)]
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_hand_encoded_event_is_protobufs(seed: int) -> None:
    for x in _arrays(seed):
        with np.errstate(all="ignore"):
            event = _histogram_event("w", x.reshape(-1), 7, 1764620000.5)
        if event is None:
            assert not np.isfinite(x.astype(np.float64)).any()
            continue
        assert event_pb2.Event.FromString(event).SerializeToString() == event


@pytest.mark.parametrize("seed", [0, 1])
def test_batched_events_equal_one_by_one(seed: int) -> None:
    items = [(f"t{i % 4}", x) for i, x in enumerate(_arrays(seed))]
    items += [(f"same{i}", np.random.default_rng(i).standard_normal((8, 8)).astype(np.float32)) for i in range(40)]
    writer = TensorBoardWriter.__new__(TensorBoardWriter)  # no file: events are returned, not written
    with np.errstate(all="ignore"):
        batched = writer.histogram_events(items, 3, 12.0)
        alone = [_histogram_event(tag, np.asarray(x).reshape(-1), 3, 12.0) for tag, x in items]
    assert batched == alone
