"""The fast paths of offline and live evaluation give exactly what the plain, step-by-step computations give."""

from __future__ import annotations

import math

import numpy as np
import pytest
from rules_synth import record, step, tensor, write_run

from trainspect.rules import DeadRelu, ExplodingTensor, LiveRuleRunner, UnchangedTensor, evaluate
from trainspect.rules.step_data import reduce_array, reduce_rows
from trainspect.rules.trial_feed import reduce_series
from trainspect.rules.weight_update_ratio import _l2

_NAMES = ("min", "max", "mean", "std", "variance", "sum", "prod", "l1", "l2")


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("shape", [(1,), (7,), (32, 32), (3, 1000), (9000,), (20000, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64, np.bool_])
def test_reduce_rows_equals_reduce_array_bit_for_bit(shape, dtype):
    rng = np.random.default_rng(0)
    rows = np.stack([(rng.standard_normal(shape) * 10).astype(dtype) for _ in range(4)])
    if rows.dtype.kind == "f":
        rows[2].flat[0] = np.nan
        rows[3].flat[-1] = np.inf
    flat = rows.reshape(4, -1)
    with np.errstate(over="ignore", invalid="ignore"):
        for name in _NAMES:
            for is_abs in (False, True):
                got = reduce_rows(flat, name, is_abs)
                assert all(_same(reduce_array(rows[i], name, is_abs), got[i]) for i in range(4)), (name, is_abs)


def test_reduce_series_groups_shapes_and_handles_odd_values():
    values = {
        0: np.arange(6, dtype=np.float32).reshape(2, 3),
        1: np.ones(4, dtype=np.float64),
        2: np.arange(6, dtype=np.float32).reshape(2, 3) * 2,
        3: np.array([3, -7], dtype=np.int8),
        4: np.zeros((0,), dtype=np.float32),
    }
    keys = [("mean", False), ("max", True), ("l2", False)]
    got = reduce_series(values, keys)
    for s, value in values.items():
        for key in keys:
            assert _same(got[s][key], reduce_array(value, *key)), (s, key)


@pytest.mark.parametrize("only_nan", [False, True])
def test_exploding_tensor_reductions_shortcut_agrees_with_the_raw_test(only_nan):
    rule = ExplodingTensor(only_nan=only_nan)
    cases = [np.ones(3), np.array([1.0, np.nan]), np.array([np.inf, 1.0]), np.array([-np.inf, np.nan]), np.arange(3)]
    for value in cases:
        raw = tensor("t", value)
        both = tensor("t", value, min=reduce_array(value, "min"), max=reduce_array(value, "max"))
        assert rule._bad(raw) == rule._bad(both), value


def test_unchanged_tensor_close_agrees_with_numpy_allclose():
    rng = np.random.default_rng(1)
    specials = [np.nan, np.inf, -np.inf, 0.0, 1e-9, 1e30]
    for equal_nan in (False, True):
        rule = UnchangedTensor(collection_names="w", equal_nan=equal_nan)
        for dtype in (np.float32, np.float64, np.float16):
            for _ in range(500):
                a = rng.standard_normal(int(rng.integers(1, 5))).astype(dtype)
                b = a.copy()
                for arr in (a, b):
                    for i in range(arr.size):
                        u = rng.random()
                        if u < 0.3:
                            with np.errstate(over="ignore"):
                                arr[i] = rng.choice(specials)
                        elif u < 0.5:
                            arr[i] = arr[i] * (1 + rng.choice([1e-7, 1e-5, 1e-3]))
                expected = bool(np.allclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=equal_nan))
                assert rule._close(a, b) == expected, (a, b)


def test_weight_norm_equals_numpy_linalg_norm():
    rng = np.random.default_rng(3)
    for shape in [(3,), (32, 32), (7, 5, 3)]:
        x = rng.standard_normal(shape)
        assert _l2(x) == float(np.linalg.norm(x))
        assert _l2(np.asfortranarray(x)) == float(np.linalg.norm(np.asfortranarray(x)))


def test_dead_relu_share_matches_the_mean_formula():
    rng = np.random.default_rng(4)
    rule = DeadRelu()
    for _ in range(50):
        x = np.maximum(rng.standard_normal((int(rng.integers(1, 40)), 13)) - rng.random() * 2, 0)
        active = 100.0 * np.mean(x > 0, axis=0)
        expected = 100.0 * float(np.mean(active < 1.0))
        check = rule.check(None, step(0, [tensor("a_relu_output_0", x)]))
        assert check is not None and check.value == expected


def test_offline_evaluation_of_raw_and_reduced_records_is_unchanged(tmp_path):
    """Weights read raw (WeightUpdateRatio) and as variance (TensorVariance): both see the same values."""
    from trainspect.rules import TensorVariance, WeightUpdateRatio

    rng = np.random.default_rng(5)
    recs = [
        record(i, [tensor("fc.weight", np.ones((3, 3)) * (1 + 1e-3 * i) + rng.normal(0, 1e-4, (3, 3)), ["weights"])])
        for i in range(12)
    ]
    run = write_run(tmp_path / "run", recs)
    rules = [TensorVariance(collection_names="weights", max_threshold=1e9, min_threshold=1e-12), WeightUpdateRatio()]
    together = evaluate(run, rules, write=False)
    alone = [evaluate(run, [r], write=False)[0] for r in rules]
    strip = lambda v: (v.status, v.datapoints, v.triggers, v.series)  # noqa: E731
    assert [strip(v) for v in together] == [strip(v) for v in alone]
    assert together[0].datapoints == 12


def test_live_lag_counts_records_being_evaluated(tmp_path):
    runner = LiveRuleRunner([ExplodingTensor()], tmp_path)
    runner.submit(record(0, [tensor("loss", np.float32(1.0), ["losses"])]))
    assert runner.lag == 1  # not started: queued
    runner.close()
    assert runner.lag == 0


def test_cheap_records_are_evaluated_on_the_spot_and_costly_ones_on_the_thread(tmp_path):
    import time

    from rules_synth import record
    from test_rules_live import wait_until

    rec = record(0, [tensor("loss", np.float32(np.nan), ["losses"])])
    inline = LiveRuleRunner([ExplodingTensor()], tmp_path / "a")
    inline.start()
    inline.submit(rec)  # the first record goes to the thread: the step interval is not known yet
    assert wait_until(lambda: inline.lag == 0)
    time.sleep(0.01)
    inline.submit(rec)
    assert inline.lag == 0 and inline.verdicts()[0].triggers == 2  # evaluated inside submit
    inline.close()
    threaded = LiveRuleRunner([ExplodingTensor()], tmp_path / "b", inline_share=0)
    threaded.start()
    for _ in range(3):
        threaded.submit(rec)
        time.sleep(0.01)
    assert threaded.close()[0].triggers == 3 and threaded.lag == 0
