"""The ARM lane (linux_aarch64) end to end, under emulation: its own tier, `nox -s arm`.

The ARM stand-in (`images/standin-aarch64.yml`: Debian 12 arm64 with Debian's CPython 3.11) runs
through qemu-user-static and binfmt_misc, about 11 times slower than native. The example's
shards and link each run in a container of it with NVIDIA's pinned aarch64 toolkit wheels,
so every compile, the seat's native stub, ccache, auditwheel and the import are aarch64 code.
Needs: a container engine that answers, and binfmt_misc with qemu-aarch64 enabled
(`apt-get install qemu-user-static binfmt-support`).
"""

from __future__ import annotations

import json
import re
import subprocess
import zipfile
from io import BytesIO
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from conftest import REPO, engine_or_skip, expected_tu_values, need, run_cuw, run_in_container
from cuw.base.files import held

pytestmark = pytest.mark.arm
RECIPE = REPO / "images" / "standin-aarch64.yml"


def _engine_or_skip():
    need("qemu-aarch64")
    return engine_or_skip()


def _cuw(*args: str) -> subprocess.CompletedProcess:
    return run_cuw(*args, timeout=5400)  # an emulated build: an hour is possible


@pytest.fixture(scope="module")
def arm_standin(tmp_path_factory: pytest.TempPathFactory) -> str:
    _engine_or_skip()
    with held(tmp_path_factory.getbasetemp().parent / "arm-standin-image.lock"):
        proc = _cuw("image", "--from", str(RECIPE))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1].split(" ", 1)[1]


@pytest.fixture(scope="module")
def built_for_arm(arm_standin: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    root = tmp_path_factory.mktemp("arm")
    folders = ["--work", str(root / "work"), "--artifacts", str(root / "artifacts"), "--dist", str(root / "dist")]
    proc = _cuw("build", "example", "--shards", "4", "--image", arm_standin, *folders, "--jobs", "2")
    (root / "build.log").write_text(proc.stdout + proc.stderr)
    return root, proc


def test_the_example_builds_for_linux_aarch64_each_job_in_its_own_container(built_for_arm, arm_standin):
    root, proc = built_for_arm
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    containers = re.findall(r"(shard \d/4|link): in image \S+ \(\w+, container (\S+)\)", out)
    assert sorted(kind for kind, _ in containers) == ["link", "shard 1/4", "shard 2/4", "shard 3/4", "shard 4/4"], out[-3000:]
    assert len({name for _, name in containers}) == 5
    (cell,) = [p.name for p in (root / "artifacts").iterdir()]
    assert cell.startswith("example-linux_aarch64-"), cell
    (wheel,) = (root / "dist").glob("*.whl")
    link = json.loads(wheel.with_name(wheel.name + ".link.json").read_text())
    assert link["ok"] and link["facts"]["misses"] == 0 and link["facts"]["total"] > 0, link["facts"]
    for archive in (root / "artifacts" / cell).glob("cuw-shard-*.tar"):
        manifest = json.loads(
            subprocess.run(["tar", "-xOf", str(archive), "manifest.json"], capture_output=True, check=True).stdout
        )
        builder = manifest["builder"]
        assert builder["image"].startswith(arm_standin + "@sha256:") and builder["glibc"] == "2.36", builder
        assert builder["floor"] == "manylinux_2_36_aarch64", builder


def test_the_arm_wheel_holds_aarch64_code_at_the_stand_ins_floor(built_for_arm):
    root, _ = built_for_arm
    (wheel,) = (root / "dist").glob("*.whl")
    tags = wheel.name[:-4].rsplit("-", 1)[1].split(".")
    assert all(t.endswith("_aarch64") for t in tags) and tags[-1] == "manylinux_2_36_aarch64", wheel.name
    machines = set()
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            data = zf.read(name)
            if data[:4] == b"\x7fELF":
                machines.add(ELFFile(BytesIO(data))["e_machine"])
    assert machines == {"EM_AARCH64"}, machines
    verify = json.loads(wheel.with_name(wheel.name + ".verify.json").read_text())
    assert verify["ok"], verify


def test_the_arm_wheel_installs_and_imports_in_a_clean_arm_container(built_for_arm, arm_standin):
    root, _ = built_for_arm
    (wheel,) = (root / "dist").glob("*.whl")
    engine = _engine_or_skip()
    script = (
        f"/opt/python/cp311-cp311/bin/python -m venv /tmp/v && /tmp/v/bin/python -m pip install -q --no-deps "
        f"--no-index /dist/{wheel.name} && cd / && "
        "/tmp/v/bin/python -c 'import json, platform, cuw_example as m; print(platform.machine(), json.dumps(m.tu_values()))'"
    )
    proc = run_in_container(engine, arm_standin, "-v", f"{root / 'dist'}:/dist:ro", "--", "sh", "-c", script, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    machine, values = proc.stdout.strip().splitlines()[-1].split(" ", 1)
    assert machine == "aarch64" and json.loads(values) == expected_tu_values()
