"""The shadow CUDA_HOME: the seat as bin/nvcc, the toolkit everywhere else, plus wheel headers it lacks."""

from __future__ import annotations

import subprocess

import pytest

from cuw.toolchain.toolkit import find_toolkit, make_shadow_home, wheel_include_dirs
from conftest import run_settings


def test_shadow_include_adds_only_headers_the_toolkit_lacks(tmp_path):
    toolkit = find_toolkit(homes=run_settings().homes)
    extra = wheel_include_dirs(toolkit.version.split(".")[0])
    lacking = [
        name
        for name in ("cusparse.h", "cublas_v2.h")
        if not (toolkit.home / "include" / name).exists() and any((d / name).exists() for d in extra)
    ]
    if not lacking:
        pytest.skip("this toolkit already has the math-library headers (or no nvidia-* wheel is installed)")
    seat = tmp_path / "seat"
    seat.write_text("#!/bin/sh\n")
    shadow = make_shadow_home(toolkit, tmp_path / "cuda", seat)
    for name in lacking:
        assert (shadow / "include" / name).resolve().parent in {d.resolve() for d in extra}
    # The toolkit's own headers stay the toolkit's.
    assert (shadow / "include" / "cuda_runtime.h").resolve() == (toolkit.home / "include" / "cuda_runtime.h").resolve()
    assert (shadow / "bin" / "nvcc").resolve() == seat.resolve()
    # torch's headers include cusparse.h: through the shadow include it compiles.
    src = tmp_path / "t.cpp"
    src.write_text(f"#include <{lacking[0]}>\nint main() {{ return 0; }}\n")
    proc = subprocess.run(["g++", "-fsyntax-only", f"-I{shadow / 'include'}", str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
