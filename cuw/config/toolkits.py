"""Which CUDA toolkit a run uses: the system's, a folder the policy names, or NVIDIA's pinned wheels.

The choice, first that is set: ``--toolkit`` (shard, link, build, toolkit), ``$CUW_TOOLKIT``,
then the policy's ``toolkits`` entry for the CUDA line (``recipes/defaults.yml``), else
``system`` (``find_toolkit``: ``$CUW_CUDA_HOME``, ``$CUDA_HOME``, nvcc on PATH, the default
install). A value is ``system``, ``wheels`` or a toolkit folder's absolute path. The run's
toolkit becomes its settings' (``Settings.with_toolkit``): ``find_toolkit`` reads it first, and
every job the run starts (shards, the link, a matrix cell's children) gets it as ``CUW_CUDA_HOME``
and ``CUDA_HOME``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from cuw.base.errors import CuwError, InputError, ToolError
from cuw.base.settings import Settings
from cuw.base.versions import version_key
from cuw.config.policy import Policy, check_toolkit_choice
from cuw.toolchain import provision
from cuw.toolchain.toolkit import Toolkit, _version_of, exe_name, find_toolkit

ENV = "CUW_TOOLKIT"


@dataclass(frozen=True)
class Chosen:
    toolkit: Toolkit
    source: str  # "system", "wheels", "path"
    how: str  # one line: where the choice came from and what it is
    provisioned: Optional[provision.Provisioned] = None


def requested(option: Optional[str], settings: Settings) -> tuple[Optional[str], str]:
    """The forced choice for this run and its source (``--toolkit`` or ``$CUW_TOOLKIT``), or None."""
    if option:
        check_toolkit_choice(option, "--toolkit")
        return option, "--toolkit"
    env = settings.toolkit
    if env:
        check_toolkit_choice(env, f"${ENV}")
        return env, f"${ENV}"
    return None, ""


def policy_choice(policy: Policy, line: str) -> str:
    return policy.toolkits.get(line, "system")


def choose(policy: Policy, settings: Settings, option: Optional[str] = None, line: Optional[str] = None) -> Chosen:
    """The run's toolkit. ``line`` (a CUDA line the caller builds, e.g. a workflow job's) is checked
    against it; without one the system toolkit's line decides which policy entry applies."""
    forced, source = requested(option, settings)
    if forced is None:
        if line is None:
            system = _system_toolkit(policy, settings)
            line = system.version
            if policy_choice(policy, line) == "system":
                return Chosen(system, "system", f"CUDA {line}: system toolkit {system.home}")
        forced, source = policy_choice(policy, line), f"toolkits.{line} in recipes/defaults.yml"
    if forced == "system":
        return _chosen_system(line, source, settings)
    if forced == "wheels":
        return _chosen_wheels(policy, line, source, settings)
    home = _toolkit_folder(forced, source)
    version = _version_of(str(home / "bin" / exe_name("nvcc")))
    if line is not None and version != line:
        raise InputError(f"{source} = {forced}: that toolkit is CUDA {version}, not {line}; name a CUDA {line} toolkit")
    return Chosen(Toolkit(home.resolve(), version), "path", f"CUDA {version}: toolkit {home} ({source})")


def _system_toolkit(policy: Policy, settings: Settings) -> Toolkit:
    """The system toolkit, or an error that offers the pinned wheels when the policy has some."""
    try:
        return find_toolkit(homes=settings.homes)
    except CuwError as exc:
        wheel_lines = sorted(policy.toolkit_wheels)
        hint = (
            (
                f"; or pass --toolkit wheels (CUW_TOOLKIT=wheels) for CUDA {wheel_lines[-1]} from the pinned "
                f"wheels in recipes/defaults.yml toolkit_wheels"
            )
            if wheel_lines
            else ""
        )
        raise type(exc)(f"{exc}{hint}") from None  # the kind find_toolkit gave: a bad setting or no toolkit


def _chosen_system(line: Optional[str], source: str, settings: Settings) -> Chosen:
    system = find_toolkit(homes=settings.homes)
    if line is not None and system.version != line:
        raise ToolError(
            f"CUDA {line}: {source} is system, but the system toolkit is CUDA {system.version} "
            f"({system.home}); {_other_line_fix(line)}"
        )
    return Chosen(system, "system", f"CUDA {system.version}: system toolkit {system.home} ({source})")


def _chosen_wheels(policy: Policy, line: Optional[str], source: str, settings: Settings) -> Chosen:
    """NVIDIA's pinned wheels of the line (default: the newest line pinned), installed once."""
    if line is None:
        if not policy.toolkit_wheels:
            raise InputError(
                f"{source} = wheels: recipes/defaults.yml has no toolkit_wheels pins; add them "
                "(a CUDA line mapped to its nvidia-cuda-nvcc, -runtime, -cccl, -crt, nvvm pins)"
            )
        line = max(policy.toolkit_wheels, key=version_key)
    pins = policy.toolkit_wheels.get(line)
    if not pins:
        major = line.split(".")[0]
        if major.isdigit() and int(major) < 13:
            raise InputError(
                f"CUDA {line}: {source} = wheels, but {provision.NO_NVCC_WHEEL.format(major=major, line=line)} "
                f"(set toolkits.{line} to system or a path and install it: .github/scripts/install-cuda.sh {line})"
            )
        raise InputError(
            f"CUDA {line}: {source} = wheels, but recipes/defaults.yml toolkit_wheels has no {line!r} pins; add them"
        )
    got = provision.ensure(provision.WheelToolkit(line, tuple(pins)), settings.folders.toolkits)
    state = "reused" if got.reused else f"installed in {got.seconds:.1f} s"
    return Chosen(
        got.toolkit,
        "wheels",
        f"CUDA {line}: toolkit from the pinned wheels at {got.toolkit.home} ({state}, {got.size_mb:.0f} MB; {source})",
        got,
    )


def _other_line_fix(line: str) -> str:
    """What makes a CUDA line other than the system's buildable here."""
    major = line.split(".")[0]
    if major.isdigit() and int(major) < 13:
        return (
            f"install CUDA {line} and point CUW_CUDA_HOME at it, or name its folder in toolkits.{line} of "
            f"recipes/defaults.yml ({provision.NO_NVCC_WHEEL.format(major=major, line=line)})"
        )
    return (
        f"install CUDA {line} and point CUW_CUDA_HOME at it, or build with --toolkit wheels (pinned in "
        f"recipes/defaults.yml toolkit_wheels), or set toolkits.{line} there"
    )


@dataclass(frozen=True)
class LineToolkit:
    """A CUDA line's toolkit for a run that builds several lines, or why this machine has none."""

    line: str
    chosen: Optional[Chosen]
    why: str = ""


def for_lines(policy: Policy, option: Optional[str], lines: list[str], settings: Settings) -> dict[str, LineToolkit]:
    """Each line's own choice (``choose`` with the line): the forced one checked against it, else the
    policy's entry for that line. A line nothing here provides gets the reason and its fix, not an error,
    so one missing line does not stop the others."""
    out: dict[str, LineToolkit] = {}
    for line in dict.fromkeys(lines):
        try:
            out[line] = LineToolkit(line, choose(policy, settings, option, line))
        except CuwError as exc:
            out[line] = LineToolkit(line, None, str(exc).removeprefix(f"CUDA {line}: "))
    return out


def for_container(policy: Policy, option: Optional[str], line: str, settings: Settings) -> str:
    """The choice for a job that builds ``line`` elsewhere (cibuildwheel's container or Windows
    build): ``system`` (the pinned install script), ``wheels`` (provisioned there by the forge) or a
    folder. Checked here, installed nothing: the job installs its own."""
    forced, source = requested(option, settings)
    if forced is None:
        forced, source = policy_choice(policy, line), f"toolkits.{line} in recipes/defaults.yml"
    if forced == "wheels":
        major = line.split(".")[0]
        if major.isdigit() and int(major) < 13:
            raise InputError(f"CUDA {line}: {source} = wheels, but {provision.NO_NVCC_WHEEL.format(major=major, line=line)}")
        newest = max(policy.toolkit_wheels, key=version_key, default=None)
        if line != newest:
            # The job's forge takes "wheels" as the newest pinned line: it finds its cell from the toolkit.
            raise InputError(
                f"CUDA {line}: {source} = wheels, but recipes/defaults.yml toolkit_wheels "
                + (
                    f"pins {newest} as the newest line, which a job given wheels builds; name the {line} toolkit's folder instead"
                    if newest
                    else "has no pins; add them"
                )
            )
    elif forced != "system":
        _toolkit_folder(forced, source)
    return forced


def _toolkit_folder(forced: str, source: str) -> Path:
    """A chosen toolkit folder, which must hold bin/nvcc."""
    home = Path(forced)
    nvcc = exe_name("nvcc")
    if not (home / "bin" / nvcc).is_file():
        raise InputError(f"{source} = {forced}: no bin/{nvcc} there; point it at a CUDA toolkit folder, or use system or wheels")
    return home


def needs_choice(policy: Policy, option: Optional[str], settings: Settings) -> bool:
    """Whether anything but today's search applies: a forced choice, or a policy entry that is not system."""
    return bool(requested(option, settings)[0]) or any(v != "system" for v in policy.toolkits.values())
