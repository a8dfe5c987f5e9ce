"""Configuration is read once (cuw/base/settings.py) and passed down: no module below the command
line reads ``os.environ`` for it or writes it to talk to another layer, and no function below the
command line takes an ``argparse.Namespace``. Every ``CUW_*`` variable is declared once."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conftest import REPO
from cuw.base.settings import NAMES, Settings

CUW = REPO / "cuw"
EXCEPTED = {
    "cuw/base/settings.py": "the one place the environment is read (Settings.from_env) and a child's starts (child_env)",
    "cuw/seat/runtime.py": "the seat runs inside each compiler call, a process of the build, and reads that call's "
    "protocol (the source filter's shard, the cache tool's variables) from its own environment",
}
ENV_CALLS = {"getenv", "putenv", "unsetenv", "getenvb"}


def environ_uses(source: str) -> list[str]:
    """``line: what`` for every touch of the process environment in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
            if node.attr in ("environ", "environb") or node.attr in ENV_CALLS:
                found.append(f"{node.lineno}: os.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [f"{node.lineno}: from os import {a.name}" for a in node.names if a.name in {"environ", *ENV_CALLS}]
    return found


def namespace_parameters(source: str) -> list[str]:
    """``line: function(parameter)`` for every parameter annotated as an argparse Namespace."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            params = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            for arg in params:
                if arg.annotation is not None and "Namespace" in ast.unparse(arg.annotation):
                    found.append(f"{node.lineno}: {node.name}({arg.arg})")
    return found


def _modules() -> list[tuple[str, str]]:
    return [(p.relative_to(REPO).as_posix(), p.read_text()) for p in sorted(CUW.rglob("*.py"))]


def test_only_the_settings_module_and_the_seat_touch_the_environment():
    touching = {name: environ_uses(text) for name, text in _modules() if name not in EXCEPTED}
    assert {k: v for k, v in touching.items() if v} == {}


def test_no_namespace_below_the_command_line():
    passed = {name: namespace_parameters(text) for name, text in _modules() if not name.startswith("cuw/cli/")}
    assert {k: v for k, v in passed.items() if v} == {}


def test_the_checks_can_fail():
    sample = (
        "import os\nfrom os import environ\n"
        "def f(args: argparse.Namespace, *, b: 'Namespace' = None):\n"
        "    os.environ['X'] = '1'\n    os.environ.update(Y='2')\n"
        "    return os.getenv('Z'), os.environ.get('W'), dict(os.environ)\n"
    )
    assert sorted(environ_uses(sample)) == [
        "2: from os import environ",
        "4: os.environ",
        "5: os.environ",
        "6: os.environ",
        "6: os.environ",
        "6: os.getenv",
    ]
    assert namespace_parameters(sample) == ["3: f(args)", "3: f(b)"]
    assert environ_uses("import os\ndef f(env: dict): return env.get('X'), os.path.join('a')\n") == []


def test_every_cuw_variable_is_declared_once():
    """A ``CUW_*`` name spelled anywhere in the package is one of the declared variables."""
    spelled = set()
    for _, text in _modules():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                spelled |= set(re.findall(r"\bCUW_[A-Z][A-Z0-9_]*[A-Z0-9]\b", node.value))
    # the workflows' own variables (act --var, repository variables), not the environment
    spelled -= {"CUW_INDEX_DIR", "CUW_CONTAINER_OPTIONS", "CUW_PAGES_FIRST"}
    assert spelled - NAMES == set()


def test_settings_read_the_environment_given():
    env = {
        "CUW_SOURCE_CACHE": "",
        "CUW_CELL_VENVS": "/v",
        "CUW_GIT_MIRROR": " ",
        "CUW_TOOLKIT": "wheels",
        "CUDA_HOME": "/cuda",
        "CUW_CCACHE": "/bin/ccache",
        "GITHUB_RUN_ID": "7",
    }
    settings = Settings.from_env(env)
    assert settings.folders.source_cache == Path.home() / ".cache" / "cuw" / "sources"  # set but empty: the default
    assert settings.folders.cell_venvs == Path("/v")
    assert settings.git_mirror is None and settings.toolkit == "wheels"
    assert settings.homes.cuda_home == "/cuda" and settings.homes.cuw_cuda_home is None
    assert settings.cache_binaries == {"ccache": "/bin/ccache"} and settings.github.run == {"github_run_id": "7"}
    with pytest.raises(TypeError):
        settings.environ["X"] = "1"  # type: ignore[index]


def test_a_run_s_choices_are_new_settings_handed_to_its_children(tmp_path):
    settings = Settings.from_env({"PATH": "/bin", "CUDA_HOME": "/old"})
    chosen = settings.with_toolkit(tmp_path / "cuda").with_mirror(tmp_path / "mirror")
    assert settings.homes.cuda_home == "/old" and settings.exports == {}  # frozen: the first is unchanged
    assert chosen.homes.cuw_cuda_home == chosen.homes.cuda_home == str(tmp_path / "cuda")
    assert chosen.child_env() == {
        "PATH": "/bin",
        "CUDA_HOME": str(tmp_path / "cuda"),
        "CUW_CUDA_HOME": str(tmp_path / "cuda"),
        "CUW_GIT_MIRROR": str(tmp_path / "mirror"),
    }
    assert "PATH" not in chosen.child_env(drop=("PATH",))


CHILD_ENV = {
    "cuw/toolchain/cache.py",
    "cuw/wheel/finish.py",
    "cuw/wheel/verify.py",
    "cuw/wheel/upstream_tests.py",
    "cuw/wheel/gpu.py",
    "cuw/seat/native.py",
}
"""Where a child's environment starts from this process's (process_environ): a tool's --version, a
cache tool's own command, auditwheel, the import check's SYSTEMROOT, a package's own tests, a GPU
smoke, the native stub's locale probe; never configuration."""


def _process_reads(source: str) -> tuple[int, int]:
    """(``Settings.from_env`` without an environment, ``process_environ()``) calls in ``source``."""
    defaults = environ_copies = 0
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and not node.args and not node.keywords:
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            defaults += name == "from_env"
            environ_copies += name == "process_environ"
        elif isinstance(node, ast.keyword) and node.arg == "default_factory" and "from_env" in ast.unparse(node.value):
            defaults += 1
    return defaults, environ_copies


def test_no_library_call_reads_the_environment_by_itself():
    """Below the command line a function takes the run's settings (or the value it needs) as a
    required argument, never ``Settings.from_env()`` of this process; tests build theirs with
    ``conftest.run_settings()``, benchmarks at their top, as the command line does."""
    reads = {name: _process_reads(text) for name, text in _modules() if name not in EXCEPTED and not name.startswith("cuw/cli/")}
    assert {k: d for k, (d, _) in reads.items() if d} == {}
    assert {k for k, (_, c) in reads.items() if c} == CHILD_ENV
    assert _process_reads("s = Settings.from_env()\ne = process_environ()\nt = Settings.from_env({})\n") == (1, 1)
    assert _process_reads("class J:\n    s: Settings = field(default_factory=Settings.from_env)\n") == (1, 0)


@pytest.mark.parametrize("argv", [["show", "example"], ["plan", "example"], ["toolkit"], ["matrix"], ["recipes"]], ids=" ".join)
def test_the_command_line_reads_the_environment_once(argv, monkeypatch, capsys):
    """A verb's whole run, library calls included, uses the settings the command line read: no
    layer falls back on the environment by itself."""
    from cuw.cli.main import main

    reads: list[object] = []
    read = Settings.from_env.__func__  # type: ignore[attr-defined]

    def counted(cls, environ=None):  # noqa: ANN001, ANN202
        if environ is None:
            reads.append(argv)
        return read(cls, environ)

    monkeypatch.setattr(Settings, "from_env", classmethod(counted))
    assert main([*argv, "--recipes", str(REPO / "recipes")] if argv != ["toolkit"] else argv) in (0, 1)
    assert len(reads) == 1, f"cuw {' '.join(argv)} read the environment {len(reads)} times"
