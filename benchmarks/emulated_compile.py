"""The ARM lane under emulation: one CUDA TU compiled natively and in the ARM stand-in, side by side.

    python benchmarks/emulated_compile.py --image cuw-standin-aarch64:<tag> [--tu k08_gemm.cu] [--repeat 3]

Compiles one of the example's kernels (``recipes/example/package/csrc/kernels``, sm_90, ``-c``)
with this machine's nvcc and, alternating, in a container of the ARM stand-in with NVIDIA's pinned
aarch64 toolkit wheels (the same toolkit the ARM lane's jobs install: ``toolkit_wheels`` in
``recipes/defaults.yml``, reused from the image's job home when a job has installed it). Prints
each run's seconds, the medians and their ratio: what a TU costs the ARM lane here, where it runs
through qemu-user. One job at a time; the machine's other load shows in both columns alike.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cuw.config.policy import load_policy  # noqa: E402
from cuw.config.recipe import default_recipes_dir  # noqa: E402
from cuw.jobs.container import _home, open_image  # noqa: E402
from cuw.toolchain.toolkit import find_toolkit  # noqa: E402
from cuw.base.settings import Settings  # noqa: E402

SETTINGS = Settings.from_env()  # the run's, read once here: a benchmark is an entry point, like the command line


def _native(nvcc: Path, source: Path, out: Path) -> float:
    started = time.monotonic()
    subprocess.run(
        [str(nvcc), "-c", str(source), "-o", str(out), "-arch=sm_90", "-O3", "-Xcompiler", "-fPIC"],
        check=True,
        capture_output=True,
    )
    return time.monotonic() - started


def _emulated(job, home: Path, toolkit: str, source: Path, out: Path) -> float:  # type: ignore[no-untyped-def]
    script = f"{toolkit}/bin/nvcc -c {source} -o {out} -arch=sm_90 -O3 -Xcompiler -fPIC"
    package = REPO / "recipes" / "example" / "package"  # the kernels include its headers
    cmd = job.engine.cmd(
        "run",
        "--rm",
        "--network",
        "host",
        "-v",
        f"{home}:{home}:ro",
        "-v",
        f"{package}:{package}:ro",
        "-v",
        f"{out.parent}:{out.parent}",
        job.ref,
        "bash",
        "-c",
        f"time -p {script}",
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    real = [line for line in proc.stderr.splitlines() if line.startswith("real ")]
    return float(real[-1].split()[1])  # the compile alone, not the container's start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", required=True, help="the ARM stand-in (cuw image --from images/standin-aarch64.yml)")
    parser.add_argument("--tu", default="k08_gemm.cu")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    job = open_image(args.image, settings=SETTINGS)
    if not job.foreign:
        parser.error(f"{args.image} runs on {job.machine}, like this machine: nothing is emulated")
    home = _home(job)
    toolkits = sorted(home.glob(".cache/cuw/toolkits/cuda*/site/nvidia/cu13"))
    if not toolkits:
        parser.error(
            f"no aarch64 toolkit under {home}: run a job in the image first (nox -s arm), which installs "
            f"{', '.join(load_policy(default_recipes_dir()).toolkit_wheels['13.0'])}"
        )
    source = REPO / "recipes" / "example" / "package" / "csrc" / "kernels" / args.tu
    nvcc = find_toolkit(homes=SETTINGS.homes).nvcc
    native, emulated = [], []
    with tempfile.TemporaryDirectory(prefix="cuw-emu-") as tmp:
        out = Path(tmp) / "k.o"
        for i in range(args.repeat):
            native.append(_native(nvcc, source, out))
            emulated.append(_emulated(job, home, str(toolkits[-1]), source, out))
            print(f"run {i + 1}: native {native[-1]:.1f} s, emulated aarch64 {emulated[-1]:.1f} s", flush=True)
    n, e = statistics.median(native), statistics.median(emulated)
    print(
        f"{args.tu} (sm_90, -O3): native x86_64 {n:.1f} s, aarch64 under qemu-user {e:.1f} s (median of {args.repeat}): "
        f"{e / n:.1f}x"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
