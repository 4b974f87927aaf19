"""One list of reduction names, one key type: parsing and writing keys, and every implementation agreeing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainspect import ReductionConfig
from trainspect.exceptions import ConfigError
from trainspect.hooks import torch_tensors
from trainspect.reductions import NAMES, Reduction, device_table, format_key, reduce, reduce_rows
from trainspect.rules.step_data import parse_reduction, reduce_array


def _all() -> list[Reduction]:
    return [Reduction(n, a) for n in NAMES for a in (False, True)]


def test_key_round_trips_and_equals_the_tuple() -> None:
    for red in _all():
        assert Reduction.parse(red.key) == red == (red.name, red.absolute)
        assert hash(red) == hash((red.name, red.absolute))
        assert red.key == format_key(red.name, red.absolute) == str(red)
    assert Reduction("mean", True).key == "abs_mean"  # the run-directory spelling


@pytest.mark.parametrize(
    ("text", "want"),
    [("l2_norm", ("l2", False)), ("ABS_L1_NORM", ("l1", True)), (" abs_variance ", ("variance", True))],
)
def test_smdebug_spellings_parse(text: str, want: tuple[str, bool]) -> None:
    assert Reduction.parse(text) == want
    assert parse_reduction(text) == want


def test_unknown_names_fail_naming_the_allowed_ones() -> None:
    for bad in ("median", "abs_", "norm"):
        with pytest.raises(ValueError, match="allowed: min, max, mean"):
            Reduction.parse(bad)
    with pytest.raises(ValueError, match="median"):
        Reduction("median")
    with pytest.raises(ValueError, match="median"):
        reduce(np.ones(2), "median")
    with pytest.raises(ConfigError, match="'median' is not a reduction"):
        ReductionConfig.from_string("mean,median")


def test_config_names_are_reductions() -> None:
    names = ReductionConfig.from_string("min,abs_mean,l2_norm,abs_l1").names()
    assert [r.key for r in names] == ["min", "l2", "abs_mean", "abs_l1"]
    assert all(isinstance(r, Reduction) for r in names)


def test_device_tables_cover_exactly_the_names() -> None:
    assert list(torch_tensors._OPS) == list(NAMES)
    with pytest.raises(ValueError, match="missing"):
        device_table({n: n for n in NAMES[:-1]})
    with pytest.raises(ValueError, match="unknown"):
        device_table({**{n: n for n in NAMES}, "median": "median"})


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_torch_device_reductions_equal_numpy(dtype: torch.dtype) -> None:
    t = (torch.randn(5, 7, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
    for red in _all():
        got = float(torch_tensors._reduce(t, red.name, red.absolute))
        np.testing.assert_allclose(got, reduce(t.numpy(), *red), rtol=1e-5, err_msg=red.key)


def test_numpy_reductions_by_hand_and_rows_equal_reduce() -> None:
    a = np.array([-3.0, 4.0, 1.0], dtype=np.float32)
    by_hand = {"min": -3.0, "max": 4.0, "mean": 2 / 3, "sum": 2.0, "prod": -12.0, "l1": 8.0, "l2": 26**0.5}
    for name, want in by_hand.items():
        assert reduce(a, name) == pytest.approx(want)
    assert reduce(a, "mean", absolute=True) == pytest.approx(8 / 3)
    assert reduce(a, "variance") == pytest.approx(np.var([-3.0, 4.0, 1.0]))
    assert np.isnan(reduce(np.zeros(0), "max"))
    rows = np.stack([a, a * 2])
    for red in _all():
        assert reduce_rows(rows, *red).tolist() == [reduce(rows[0], *red), reduce(rows[1], *red)]
    assert reduce_array is reduce  # the rules' older name
