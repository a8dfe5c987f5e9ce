"""The real CUDA toolkit, and the shadow CUDA_HOME whose bin/nvcc is the seat."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Optional

from cuw.base.errors import CuwError, InputError, ToolError
from cuw.base.reading import open_file
from cuw.base.settings import ToolkitHomes

DEFAULT_CUDA_HOME = "/usr/local/cuda-13.0"
# Where NVIDIA's Windows installer puts a CUDA line (.github/scripts/install-cuda.ps1).
DEFAULT_CUDA_HOME_WINDOWS = "C:\\Program Files\\NVIDIA GPU Computing Toolkit\\CUDA\\v13.0"


def is_windows(platform: Optional[str] = None) -> bool:
    """Whether ``platform`` -- a ``sys.platform`` value (``win32``, ``linux``) or a lane
    (``windows``, ``linux_aarch64``) -- is Windows; the host when None."""
    return (sys.platform if platform is None else platform).startswith("win")


def exe_name(tool: str, platform: Optional[str] = None) -> str:
    """A toolkit program's file name on ``platform``: ``nvcc`` or ``nvcc.exe``."""
    return tool + ".exe" if is_windows(platform) else tool


@dataclass(frozen=True)
class Toolkit:
    home: Path
    version: str  # "13.0"
    windows: bool = field(default_factory=is_windows)  # its programs are bin/<tool>.exe

    @property
    def nvcc(self) -> Path:
        return self.tool("nvcc")

    def tool(self, name: str) -> Path:
        """``bin/<name>`` (``bin/<name>.exe`` in a Windows toolkit)."""
        return self.home / "bin" / exe_name(name, "win32" if self.windows else "linux")


@lru_cache(maxsize=None)
def _version_of(nvcc: str) -> str:
    try:  # bytes that are not UTF-8 are replaced, not a crash; a hung nvcc is named
        out = subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True, errors="replace", timeout=60, stdin=subprocess.DEVNULL
        ).stdout
    except subprocess.TimeoutExpired:
        raise ToolError(f"{nvcc} --version did not answer in 60 s: not a working CUDA toolkit") from None
    except OSError as exc:
        raise ToolError(f"cannot run {nvcc}: {exc}") from None
    match = re.search(r"release (\d+\.\d+)", out)
    if not match:
        raise ToolError(f"{nvcc} --version printed no 'release X.Y' line")
    return match.group(1)


def find_toolkit(platform: Optional[str] = None, *, homes: ToolkitHomes) -> Toolkit:
    """``homes`` (the run's: ``$CUW_CUDA_HOME``, ``$CUDA_HOME``, or the toolkit the run chose),
    nvcc on PATH, then the default install.

    ``platform`` (a ``sys.platform`` value or a lane; the host when None) decides the
    toolkit's shape: on Windows nvcc is ``bin\\nvcc.exe``, ``$CUDA_PATH`` (what NVIDIA's
    installer sets) is read after ``$CUDA_HOME``, and the default is the installer's folder.
    """
    windows = is_windows(platform)
    nvcc = exe_name("nvcc", platform)
    for var, named in homes.named():
        # A toolkit the user named is the one they meant: no silent fallback to another nvcc.
        if named and not _is_shadow(Path(named)) and not (Path(named) / "bin" / nvcc).is_file():
            raise InputError(
                f"{var}={named} has no bin/{nvcc}: point it at a CUDA toolkit (the folder holding bin/{nvcc}), "
                f"or unset it to use nvcc on PATH or {DEFAULT_CUDA_HOME_WINDOWS if windows else DEFAULT_CUDA_HOME}"
            )
    candidates = [named for _, named in homes.named()]
    if windows:
        candidates.append(homes.cuda_path)
    on_path = shutil.which(nvcc)
    if on_path:
        candidates.append(_home_of_nvcc(Path(on_path)))
    candidates.append(DEFAULT_CUDA_HOME_WINDOWS if windows else DEFAULT_CUDA_HOME)
    for home in candidates:
        if home and (Path(home) / "bin" / nvcc).is_file() and not _is_shadow(Path(home)):
            home_path = Path(home).resolve()
            return Toolkit(home_path, _version_of(str(home_path / "bin" / nvcc)), windows)
    where = "bin\\nvcc.exe" if windows else "bin/nvcc"
    raise ToolError(f"no CUDA toolkit found: set CUDA_HOME (or CUW_CUDA_HOME) to a folder with {where}")


def _home_of_nvcc(nvcc: Path) -> str:
    # /usr/local/bin/nvcc may be a small wrapper script that execs the real one.
    real = nvcc.resolve()
    try:
        with open_file(real, "nvcc") as fh:  # its first block only: never a FIFO waited on, nor /dev/zero read whole
            head = fh.read(4096)
    except (OSError, CuwError):
        head = b""
    if head.startswith(b"#!"):
        match = re.search(rb"(/\S+)/bin/nvcc\b", head)
        if match:
            return match.group(1).decode()
    return str(real.parent.parent)


SHADOW_MARK = ".cuw-shadow"


def _is_shadow(home: Path) -> bool:
    return (home / SHADOW_MARK).exists()


def make_shadow_home(toolkit: Toolkit, shadow: Path, seat: Path) -> Path:
    """A mirror of the toolkit whose ``bin/nvcc`` is the seat.

    Every other entry links to the real toolkit, so builds that run
    ``$CUDA_HOME/bin/nvcc`` by path (torch's distutils path) reach the seat,
    and everything else (headers, libraries, nvvm, other tools) is the real one.
    """
    if shadow.exists():
        shutil.rmtree(shadow)
    (shadow / "bin").mkdir(parents=True)
    for entry in toolkit.home.iterdir():
        if entry.name not in ("bin", "include"):
            (shadow / entry.name).symlink_to(entry)
    if (toolkit.home / "lib").is_dir() and not (shadow / "lib64").exists():
        # A toolkit from NVIDIA's wheels has lib/ only; builds look in $CUDA_HOME/lib64.
        (shadow / "lib64").symlink_to(toolkit.home / "lib")
    _merged_include(toolkit, shadow / "include")
    for tool in (toolkit.home / "bin").iterdir():
        if tool.name != "nvcc":
            (shadow / "bin" / tool.name).symlink_to(tool)
    (shadow / "bin" / "nvcc").symlink_to(seat)
    (shadow / SHADOW_MARK).write_text(str(toolkit.home) + "\n")
    return shadow


def wheel_include_dirs(major: str) -> list[Path]:
    """Header folders of the ``nvidia-*`` wheels in this environment (torch depends on them):
    ``nvidia/cu13/include`` for CUDA 13, ``nvidia/<library>/include`` for the CUDA 12 layout."""
    try:
        import nvidia  # namespace package of the nvidia-* wheels
    except ImportError:
        return []
    found: list[Path] = []
    for root in map(Path, nvidia.__path__):
        found += [root / f"cu{major}" / "include"] if (root / f"cu{major}" / "include").is_dir() else []
        found += sorted(p for p in root.glob("*/include") if p.is_dir() and not re.fullmatch(r"cu\d+", p.parent.name))
    return found


def _merged_include(toolkit: Toolkit, target: Path) -> None:
    """The toolkit's include folder, plus headers it lacks from the nvidia-* wheels.

    Toolkits installed without the math libraries (this one has no cusparse.h or
    cublas_v2.h) cannot build torch extensions: torch's own headers include them.
    Everything the toolkit has stays the toolkit's; only missing entries are added.
    """
    target.mkdir()
    for entry in (toolkit.home / "include").iterdir():
        (target / entry.name).symlink_to(entry)
    for folder in wheel_include_dirs(toolkit.version.split(".")[0]):
        for entry in folder.iterdir():
            if not (target / entry.name).exists() and not (target / entry.name).is_symlink():
                (target / entry.name).symlink_to(entry)


def find_cuobjdump(toolkit: Toolkit, override: Optional[str] = None) -> Path:
    """``override`` (the run's ``$CUW_CUOBJDUMP``), else the toolkit's cuobjdump, else the one the
    ``nvidia-cuda-cuobjdump`` wheel ships (a newer cuobjdump reads older binaries)."""
    if override:
        if not Path(override).is_file():
            raise InputError(f"CUW_CUOBJDUMP={override} is not a file")
        return Path(override)
    own = toolkit.tool("cuobjdump")
    if own.exists():
        return own
    try:
        import nvidia  # namespace package of the nvidia-* wheels

        for root in nvidia.__path__:
            for found in sorted(Path(root).glob("cu*/bin/" + own.name)):
                return found
    except ImportError:
        pass
    raise ToolError(f"cuobjdump not found in {toolkit.home}/bin nor in the nvidia-cuda-cuobjdump wheel")
