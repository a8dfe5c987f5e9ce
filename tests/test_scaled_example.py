"""The benchmark's scaled example: weights and costs times K, on a copy only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO, expected_tu_values, scaled_example
from cuw.config.recipe import load_recipe


def test_scale_multiplies_weights_and_costs_of_the_copy(tmp_path: Path):
    bench = scaled_example()
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes", recipes, symlinks=True)
    before = (REPO / "recipes" / "example" / "package" / "csrc" / "kernels" / "k08_gemm.cu").read_text()

    values = bench.scale_example(recipes / "example", 3, REPO / "recipes")

    original = expected_tu_values()
    assert values == {name: (v // 1000) * 1000 + (v % 1000) * 3 for name, v in original.items()}
    assert bench.tu_values(recipes / "example") == values
    costs = json.loads((recipes / "example" / "costs.json").read_text())["costs"]
    committed = json.loads((REPO / "recipes" / "example" / "costs.json").read_text())["costs"]
    assert costs == {tu: round(s * 3, 3) for tu, s in committed.items()}
    # The scaled copy is still a valid recipe whose cost table matches its TUs.
    assert load_recipe("example", recipes).name == "cuw-example"
    assert (REPO / "recipes" / "example" / "package" / "csrc" / "kernels" / "k08_gemm.cu").read_text() == before


def test_scale_refuses_the_committed_recipe_and_overflowing_weights(tmp_path: Path):
    bench = scaled_example()
    with pytest.raises(ValueError, match="scale a copy"):
        bench.scale_example(REPO / "recipes" / "example", 2, REPO / "recipes")
    recipes = tmp_path / "recipes"
    shutil.copytree(REPO / "recipes" / "example", recipes / "example", symlinks=True)
    with pytest.raises(ValueError, match="exceeds 999"):
        bench.scale_example(recipes / "example", 50, REPO / "recipes")
    assert bench.tu_values(recipes / "example") == expected_tu_values()  # nothing half-scaled
