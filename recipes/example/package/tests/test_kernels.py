"""The example package's own tests: what its wheel answers on a machine without a GPU.

Run by the forge's verify gate against the installed wheel (recipes/example/recipe.yml,
verify.tests), from the source tree: each kernel TU's id and weight are read from its .cu file
and must be what the library's host functions report.
"""

import os
import re
from pathlib import Path

import pytest

import cuw_example

KERNELS = Path(__file__).resolve().parent.parent / "csrc" / "kernels"


def _declared() -> dict[str, int]:
    """Each TU's name and id * 1000 + weight, as its source defines them."""
    out = {}
    for source in sorted(KERNELS.glob("k*.cu")):
        text = source.read_text()
        fields = dict(re.findall(r"#define CUW_TU_(NAME|ID|WEIGHT) (\w+)", text))
        out[fields["NAME"]] = int(fields["ID"]) * 1000 + int(fields["WEIGHT"])
    return out


def test_every_tu_is_linked_in_dispatch_order():
    declared = _declared()
    assert declared, f"no k*.cu in {KERNELS}"  # however many the build has (a benchmark trims or scales them)
    assert list(cuw_example.tu_values()) == sorted(declared)


@pytest.mark.parametrize("name", sorted(_declared()))
def test_tu_host_function_answers_its_id_and_weight(name):
    assert cuw_example.tu_values()[name] == _declared()[name]


def test_build_info_names_the_example():
    assert cuw_example.build_info().startswith("cuw-example ")


def test_launch_without_a_gpu_returns_a_cuda_error():
    if os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        pytest.skip("a GPU may be visible: launching on a null pointer is only safe with the GPUs hidden")
    assert cuw_example.launch_all(0, 1) != 0


@pytest.mark.skipif(os.environ.get("CUDA_VISIBLE_DEVICES") == "", reason="needs a GPU (the verify gate hides them)")
def test_launch_on_a_gpu():
    torch = pytest.importorskip("torch")
    data = torch.ones(1024, device="cuda")
    assert cuw_example.launch_all(data.data_ptr(), data.numel()) == 0
    torch.cuda.synchronize()
    assert bool(torch.isfinite(data).all())
