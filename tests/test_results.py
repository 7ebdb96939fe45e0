"""The results contract: flat figures plus the tier, one file per notebook."""

import json
import math

import pytest
import torch

import coursekit


def test_results_are_flat_and_carry_the_tier(setup):
    path = coursekit.save_results(
        "99_example", {"speedup": torch.tensor(1.5).item(), "ok": True, "backend": "gloo"}, setup
    )
    record = json.loads(path.read_text())
    assert path.name == "99_example.json"
    assert record == coursekit.load_results("99_example", setup.results_dir)
    assert record["tier"] == setup.tier and record["speedup"] == 1.5 and record["ok"] is True


@pytest.mark.parametrize("value, error", [([1, 2], TypeError), ({"a": 1}, TypeError),
                                          (None, TypeError), (math.nan, ValueError)])
def test_results_refuse_what_is_not_a_flat_figure(setup, value, error):
    with pytest.raises(error, match="figure"):
        coursekit.save_results("99_example", {"bad": value}, setup)
