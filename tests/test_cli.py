"""Bad input on the command line: one clear line, a non-zero exit, no traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def cuw(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cuw", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


def assert_clean_error(proc: subprocess.CompletedProcess, pattern: str, code: int = 2) -> None:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    assert pattern in proc.stderr, proc.stderr


def test_unknown_recipe_lists_the_known_ones(tmp_path, recipes_dir):
    proc = cuw("shard", "flash_atten", "1/2", "--recipes", str(recipes_dir), cwd=tmp_path)
    assert_clean_error(proc, "unknown recipe 'flash_atten'")
    assert "known recipes: " in proc.stderr and "example, example_source, example_torch, flash_attn" in proc.stderr


@pytest.mark.parametrize("spec", ["0/4", "5/4", "a/b", "3"])
def test_malformed_shard_spec(tmp_path, recipes_dir, spec):
    proc = cuw("shard", "example", spec, "--recipes", str(recipes_dir), cwd=tmp_path)
    assert_clean_error(proc, f"shard '{spec}'")
    assert not (tmp_path / "artifacts").exists() and not (tmp_path / ".cuw").exists()


def test_unknown_yaml_key(tmp_path, recipes_dir):
    path = recipes_dir / "example" / "recipe.yml"
    path.write_text(path.read_text().replace("backend:", "bakend:"))
    proc = cuw("shard", "example", "1/2", "--recipes", str(recipes_dir), cwd=tmp_path)
    assert_clean_error(proc, "unknown key 'bakend'; did you mean 'backend'?")
    assert str(path) in proc.stderr


def test_link_with_no_archives(tmp_path, recipes_dir):
    proc = cuw("link", "example", "--recipes", str(recipes_dir), cwd=tmp_path)
    assert_clean_error(proc, "no shard archives for example-")
    assert "nox -s shard -- example 1/N" in proc.stderr


def test_unknown_verb_and_missing_arguments(tmp_path):
    assert_clean_error(cuw("compile", "example", cwd=tmp_path), "invalid choice: 'compile'")
    assert_clean_error(cuw("shard", "example", cwd=tmp_path), "the following arguments are required: shard")


def test_recipes_listing(tmp_path, recipes_dir):
    proc = cuw("recipes", "--recipes", str(recipes_dir), cwd=tmp_path)
    assert proc.returncode == 0
    assert "example" in proc.stdout and "scikit-build-core" in proc.stdout and "torch-extension" in proc.stdout


def test_nox_and_invoke_offer_every_verb_with_every_option(tmp_path):
    """The verbs are defined once (the CLI's parser): nox has a session and invoke a task for
    each, and each invoke task takes every option the verb has."""
    from cuw.cli.parser import verb_specs

    verbs = verb_specs()
    assert {"shard", "link", "build", "plan", "costs", "lint-guards", "workflow"} <= {v.name for v in verbs}
    nox = subprocess.run([sys.executable, "-m", "nox", "-l"], cwd=REPO, capture_output=True, text=True).stdout
    inv = subprocess.run([sys.executable, "-m", "invoke", "--list"], cwd=REPO, capture_output=True, text=True).stdout
    for verb in verbs:
        assert f"{verb.name.replace('-', '_')} -> " in nox, (verb.name, nox)
        assert f"  {verb.name} " in inv, (verb.name, inv)
        helped = subprocess.run(
            [sys.executable, "-m", "invoke", "--help", verb.name], cwd=REPO, capture_output=True, text=True
        ).stdout
        for option in verb.options:
            if not option.positional:
                name = option.flag.lstrip("-") if option.flag != "--from" else option.dest
                assert f"--{name}" in helped, (verb.name, option.flag, helped)
    # A task passes its arguments through: positionals, a value, a repeated option (comma list).
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "--search-root",
            str(REPO),
            "matrix",
            "--package",
            "example",
            "--platform",
            "linux,windows",
            "--cuda",
            "13.0",
            "--output",
            str(tmp_path / "m.json"),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    chunks = json.loads((tmp_path / "m.json").read_text())["chunks"]
    assert sorted(c["id"] for c in chunks) == ["example-linux-cu13.0", "example-windows-cu13.0"], chunks
    # ... or given again, as cuw takes it: both forms reach the verb with both values.
    again = [*proc.args[:8], "--platform", "linux", "--platform", "windows", *proc.args[10:]]
    (tmp_path / "m.json").unlink()
    proc = subprocess.run(again, cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    chunks = json.loads((tmp_path / "m.json").read_text())["chunks"]
    assert sorted(c["id"] for c in chunks) == ["example-linux-cu13.0", "example-windows-cu13.0"], chunks


def test_zero_shards_is_refused(tmp_path, recipes_dir):
    proc = cuw("build", "example", "--shards", "0", "--recipes", str(recipes_dir), cwd=tmp_path)
    assert_clean_error(proc, "--shards 0: a shard count is 1..255")
    assert not (tmp_path / ".cuw").exists()


def test_unknown_cache_tool_is_refused(tmp_path, recipes_dir):
    proc = cuw("shard", "example", "1/2", "--cache-tool", "zcache", "--recipes", str(recipes_dir), cwd=tmp_path)
    assert_clean_error(proc, "invalid choice: 'zcache'")


def test_show_resolves_a_cell(tmp_path, recipes_dir):
    import json

    proc = cuw("show", "example_torch", "--cell", "linux_aarch64/3.12/13.0/2.14", "--recipes", str(recipes_dir), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["cell_id"] == "example_torch-linux_aarch64-py3.12-cu13.0-torch2.14"
    assert shown["local_version_label"] == "cu130torch2.14" and shown["resolved_archs"] == ["9.0"]
    assert shown["cache"]["tool"] == "ccache"
    outside = cuw("show", "example", "--cell", "linux/3.9/13.0", "--recipes", str(recipes_dir), cwd=tmp_path)
    assert_clean_error(outside, "Python 3.9 is not one of its Pythons")
    assert_clean_error(cuw("show", "example", "--cell", "x", "--recipes", str(recipes_dir), cwd=tmp_path), "is not LANE/PY/CUDA")


def test_recipes_listing_counts_cells(tmp_path, recipes_dir):
    proc = cuw("recipes", "--recipes", str(recipes_dir), cwd=tmp_path)
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()[1:]}
    # example builds one py3 wheel per lane x CUDA line (wheel_python: py3): 2 lanes x 3 lines.
    assert rows["example"][-1] == "6" and rows["example_torch"][-1] == "48"


def test_a_nox_session_ends_with_the_verbs_own_exit_code(tmp_path):
    """nox alone turns every failure into 1: the sessions pass the verb's code on (2: bad input)."""
    proc = subprocess.run(
        [sys.executable, "-m", "nox", "-s", "shard", "--", "example", "1/0"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("cuw: error:") == 1 and "Traceback" not in proc.stderr
    ok = subprocess.run([sys.executable, "-m", "nox", "-s", "recipes"], cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0 and "example" in ok.stdout


@pytest.mark.parametrize(
    "verb", [["recipes"], ["grid"], ["show", "example"], ["matrix", "--package", "example"], ["--help"], ["matrix", "--help"]]
)
def test_a_closed_or_full_stdout_is_one_line_and_exit_2(verb):
    """A result with nowhere to go is not a success: fd 1 closed, or a full disk behind it (--help too:
    argparse drops a failed write of its help and exits 0)."""
    import subprocess
    import sys

    closed = subprocess.run(
        [sys.executable, "-m", "cuw", *verb],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        pass_fds=(),
        preexec_fn=lambda: __import__("os").close(1),
    )
    assert closed.returncode == 2 and "Traceback" not in closed.stderr, closed.stderr
    assert closed.stderr.strip().splitlines()[-1] == "cuw: error: standard output is closed; the result had nowhere to go"
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "cuw", *verb], stdout=full, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "cuw: error: cannot write to standard output (No space left on device)"
