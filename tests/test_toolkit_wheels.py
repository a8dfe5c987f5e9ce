"""A CUDA line's toolkit: the system's, a folder the policy names, or NVIDIA's pinned wheels.

The e2e test builds the example with the wheel-provisioned CUDA 13.0 toolkit on a view of
this machine where the system toolkit is hidden (``find_toolkit`` fails there), and compares
the exported dynamic symbols of its wheel with the system toolkit's wheel.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import yaml
from elftools.elf.elffile import ELFFile

from cuw.base.errors import CuwError, InputError
from cuw.config.policy import load_policy
from cuw.toolchain.toolkit import Toolkit, find_toolkit, make_shadow_home

from conftest import expected_tu_values, wheel_tu_values, run_settings

# The programs a CUDA toolkit puts in bin/ (and /usr/local/bin here holds copies or wrappers of).
CUDA_TOOLS = {"nvcc", "ptxas", "fatbinary", "cudafe++", "nvlink", "bin2c", "__nvcc_device_query", "cuobjdump", "nvdisasm", "cicc"}


def _cuw(*args: str, env: dict, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuw", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _edit_policy(recipes_dir: Path, **changes) -> None:
    path = recipes_dir / "defaults.yml"
    data = yaml.safe_load(path.read_text())
    data.update(changes)
    path.write_text(yaml.safe_dump(data))


# -- the policy and the choice: one-line errors naming the key and the fix -----------------


def test_policy_refuses_wheels_for_a_cuda_12_line(recipes_dir):
    _edit_policy(recipes_dir, toolkits={"12.8": "wheels", "13.0": "system"})
    with pytest.raises(CuwError, match=r"toolkits\.12\.8 = wheels: NVIDIA's CUDA 12 wheels ship ptxas but no nvcc driver"):
        load_policy(recipes_dir)


def test_policy_refuses_loose_pins_and_unknown_choices(recipes_dir):
    _edit_policy(recipes_dir, toolkit_wheels={"13.0": ["nvidia-cuda-nvcc>=13.0"]})
    with pytest.raises(InputError, match=r"toolkit_wheels\.13\.0: 'nvidia-cuda-nvcc>=13.0' is not an exact pin"):
        load_policy(recipes_dir)
    _edit_policy(recipes_dir, toolkit_wheels={"13.0": ["nvidia-nvvm==13.0.88"]}, toolkits={"13.0": "wheels"})
    with pytest.raises(InputError, match=r"toolkit_wheels\.13\.0: no nvidia-cuda-nvcc pin"):
        load_policy(recipes_dir)
    _edit_policy(recipes_dir, toolkit_wheels={}, toolkits={"13.0": "cuda13"})
    with pytest.raises(CuwError, match=r"toolkits\.13\.0 = 'cuda13': use system, wheels or the absolute path"):
        load_policy(recipes_dir)


@pytest.mark.parametrize("folder", ["../../lib", "/usr/local/cuda/lib64", "$ORIGIN/nvidia/cu13/lib", ""])
def test_policy_refuses_a_runtime_rpath_outside_site_packages(recipes_dir, folder):
    policy = yaml.safe_load((recipes_dir / "defaults.yml").read_text())
    policy["wheel"]["cuda_runtime_rpath"] = {"13.0": [folder]}
    (recipes_dir / "defaults.yml").write_text(yaml.safe_dump(policy))
    with pytest.raises(CuwError, match=r"wheel\.cuda_runtime_rpath\.13\.0: .* must be a folder relative to site-packages"):
        load_policy(recipes_dir)


def test_the_shipped_policy_pins_cuda_13_only():
    from conftest import REPO

    policy = load_policy(REPO / "recipes")
    assert set(policy.toolkit_wheels) == {"13.0"}
    assert any(p.startswith("nvidia-cuda-nvcc==13.0.") for p in policy.toolkit_wheels["13.0"])


def test_cli_errors_name_the_option_and_the_fix(tmp_path, recipes_dir):
    env = {k: v for k, v in os.environ.items() if k != "CUW_TOOLKIT"}
    proc = _cuw(
        "build",
        "example",
        "--toolkit",
        str(tmp_path / "nowhere"),
        "--recipes",
        str(recipes_dir),
        "--work",
        str(tmp_path / "w"),
        "--artifacts",
        str(tmp_path / "a"),
        "--dist",
        str(tmp_path / "d"),
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    assert f"cuw: error: --toolkit = {tmp_path / 'nowhere'}: no bin/nvcc there" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = _cuw("toolkit", "--cuda", "12.8", "--recipes", str(recipes_dir), env={**env, "CUW_TOOLKIT": "wheels"}, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "CUDA 12.8: $CUW_TOOLKIT = wheels, but NVIDIA's CUDA 12 wheels ship ptxas but no nvcc driver" in proc.stderr
    assert "install-cuda.sh 12.8" in proc.stderr
    proc = _cuw("toolkit", "--toolkit", "cuda13", "--recipes", str(recipes_dir), env=env, cwd=tmp_path)
    assert proc.returncode == 2 and "--toolkit = 'cuda13': use system, wheels or the absolute path" in proc.stderr


def test_toolkit_path_from_the_policy_is_checked_against_the_line(tmp_path, recipes_dir):
    system = find_toolkit(homes=run_settings().homes)
    other = "12.8" if system.version != "12.8" else "13.0"
    _edit_policy(recipes_dir, toolkits={other: str(system.home)})
    env = {k: v for k, v in os.environ.items() if k != "CUW_TOOLKIT"}
    proc = _cuw("toolkit", "--cuda", other, "--recipes", str(recipes_dir), env=env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert (
        f"toolkits.{other} in recipes/defaults.yml = {system.home}: that toolkit is CUDA {system.version}, not {other}"
        in proc.stderr
    )
    _edit_policy(recipes_dir, toolkits={system.version: str(system.home)})
    proc = _cuw("toolkit", "--cuda", system.version, "--recipes", str(recipes_dir), env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(system.home)


def test_shadow_home_gives_a_lib_only_toolkit_a_lib64(tmp_path):
    """NVIDIA's wheels ship lib/ only; builds (and nvcc.profile) look in lib64."""
    home = tmp_path / "cu13"
    for sub in ("bin", "include", "lib", "nvvm/bin"):
        (home / sub).mkdir(parents=True)
    (home / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (home / "lib" / "libcudart_static.a").write_bytes(b"!<arch>\n")
    seat = tmp_path / "seat"
    seat.write_text("#!/bin/sh\n")
    shadow = make_shadow_home(Toolkit(home, "13.0", windows=False), tmp_path / "shadow", seat)
    assert (shadow / "lib64" / "libcudart_static.a").is_file()
    assert (shadow / "nvvm").resolve() == (home / "nvvm").resolve()
    assert (shadow / "bin" / "nvcc").resolve() == seat.resolve()


# -- the machine view without the system toolkit ---------------------------------------------


def hidden_view(tmp_path: Path) -> dict:
    """This machine's environment with the system toolkit out of reach of every way
    ``find_toolkit`` looks: no ``CUW_CUDA_HOME``; ``CUDA_HOME`` an empty folder (else the
    default /usr/local/cuda-13.0 would be taken); PATH without toolkit bin folders, and a
    folder holding CUDA programs (/usr/local/bin's nvcc wrapper) replaced by links to its others."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("CUW_CUDA_HOME", "CUDA_PATH", "CUW_TOOLKIT", "PYTORCH_NVCC", "CUDACXX")
    }
    nowhere = tmp_path / "no-cuda"
    nowhere.mkdir()
    env["CUDA_HOME"] = str(nowhere)
    kept: list[str] = []
    for i, folder in enumerate(os.environ.get("PATH", "").split(os.pathsep)):
        real = Path(folder).resolve() if folder else None
        if real is None or not real.is_dir() or real.as_posix().startswith("/usr/local/cuda"):
            continue
        names = {p.name for p in real.iterdir()}
        if names & CUDA_TOOLS:
            farm = tmp_path / f"path-{i}"
            farm.mkdir()
            for name in sorted(names - CUDA_TOOLS):
                (farm / name).symlink_to(real / name)
            kept.append(str(farm))
        else:
            kept.append(folder)
    env["PATH"] = os.pathsep.join(kept)
    return env


def test_the_hidden_view_really_hides_the_system_toolkit(tmp_path):
    env = hidden_view(tmp_path)
    assert shutil.which("nvcc", path=env["PATH"]) is None
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from cuw.base.settings import Settings; from cuw.toolchain.toolkit import find_toolkit; "
            "print(find_toolkit(homes=Settings.from_env().homes))",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0
    assert "has no bin/nvcc" in proc.stderr


def _exported(so: bytes, where: Path) -> set[str]:
    """Defined global and weak dynamic symbols, with their version when there is one."""
    path = where / "lib.so"
    path.write_bytes(so)
    with open(path, "rb") as f:
        elf = ELFFile(f)
        dynsym = elf.get_section_by_name(".dynsym")
        assert dynsym is not None
        return {
            sym.name
            for sym in dynsym.iter_symbols()
            if sym.name and sym["st_shndx"] != "SHN_UNDEF" and sym["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")
        }


def wheel_symbols(wheel: Path, where: Path) -> dict[str, set[str]]:
    with zipfile.ZipFile(wheel) as z:
        return {n: _exported(z.read(n), where) for n in z.namelist() if n.endswith(".so") or ".so." in n}


@pytest.mark.e2e
def test_example_builds_with_the_wheel_toolkit_where_the_system_one_is_hidden(tmp_path, recipes_dir):
    env = hidden_view(tmp_path)
    started = time.monotonic()
    common = ["--recipes", str(recipes_dir)]
    wheels = [
        *common,
        "--work",
        str(tmp_path / "w-wheels"),
        "--artifacts",
        str(tmp_path / "a-wheels"),
        "--dist",
        str(tmp_path / "d-wheels"),
    ]
    proc = _cuw("build", "example", "--toolkit", "wheels", *wheels, env=env, cwd=tmp_path, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "toolkit: CUDA 13.0: toolkit from the pinned wheels at " in proc.stderr, proc.stderr[-2000:]
    home = proc.stderr.split("toolkit from the pinned wheels at ", 1)[1].split(" (", 1)[0]
    wheel_built = time.monotonic() - started
    # Nothing of the hidden toolkit reached the build: CMake found the wheel toolkit (through the
    # seat's shadow CUDA_HOME, whose lib64 nvcc links from) and never named /usr/local/cuda.
    compilers = list((tmp_path / "w-wheels").rglob("CMakeCUDACompiler.cmake"))
    assert len(compilers) >= 2  # the shards and the link configured
    for found in [*compilers, *(tmp_path / "w-wheels").rglob("CMakeCache.txt")]:
        text = found.read_text(errors="replace")
        assert "/usr/local/cuda" not in text, f"{found} names the hidden system toolkit"
    for found in compilers:
        assert f'set(CMAKE_CUDA_COMPILER_TOOLKIT_ROOT "{home}")' in found.read_text(), found
    (wheel_a,) = (tmp_path / "d-wheels").glob("*.whl")
    assert wheel_tu_values(wheel_a, "cuw_example", tmp_path / "import-wheels") == expected_tu_values()

    system_env = {k: v for k, v in os.environ.items() if k != "CUW_TOOLKIT"}
    system = [
        *common,
        "--work",
        str(tmp_path / "w-sys"),
        "--artifacts",
        str(tmp_path / "a-sys"),
        "--dist",
        str(tmp_path / "d-sys"),
    ]
    proc = _cuw("build", "example", "--toolkit", "system", *system, env=system_env, cwd=tmp_path, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel_b,) = (tmp_path / "d-sys").glob("*.whl")
    assert wheel_a.name == wheel_b.name

    where = tmp_path / "elf"
    where.mkdir()
    from_wheels, from_system = wheel_symbols(wheel_a, where), wheel_symbols(wheel_b, where)
    assert from_wheels and set(from_wheels) == set(from_system)
    for name, symbols in from_wheels.items():
        assert symbols, f"{name} exports nothing"
        assert symbols == from_system[name], (name, sorted(symbols ^ from_system[name])[:20])
    print(
        f"wheel toolkit build {wheel_built:.0f} s, both builds {time.monotonic() - started:.0f} s; "
        f"{sum(map(len, from_wheels.values()))} exported symbols in {len(from_wheels)} .so, identical"
    )
