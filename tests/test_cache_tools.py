"""The same example, handed over by sccache and by a shared ccache remote (Redis)."""

from __future__ import annotations

import hashlib
import os
import re
import json
import socket
import subprocess
import sys
import tarfile
import threading
import time
import zipfile
from pathlib import Path

import pytest
import yaml

from conftest import EXAMPLE_CUDA_TUS, EXAMPLE_HOST_TUS, expected_tu_values, need, wheel_tu_values, run_settings
from cuw.toolchain.builder import current_builder
from cuw.jobs import archive
from cuw.toolchain.cache import check_remote
from cuw.base.errors import CuwError
from cuw.partition.rules import owner
from cuw.config.paths import Paths
from cuw.jobs.local import run_build
from cuw.jobs.link import run_link
from cuw.config.policy import CacheChoice
from cuw.config.recipe import load_recipe

N = 3


@pytest.mark.long  # sccache's handoff, three cold shards and two links (~110 s): nox -s long
def test_sccache_handoff_passes_every_gate_and_attributes_a_missing_shard(recipes_dir, paths, tmp_path):
    # Per-job paths on every CUDA compile line, as torch extensions (-I$CUDA_HOME/include) and recipes
    # with ${CUW_EXTRA_DEPS} have them: each job's shadow CUDA_HOME and deps folder are its own.
    recipe_file = recipes_dir / "example" / "recipe.yml"
    data = yaml.safe_load(recipe_file.read_text())
    data["extra_deps"] = ["six==1.16.0"]
    data["env"] = {"CMAKE_ARGS": "-DCMAKE_CUDA_FLAGS='-I${CUDA_HOME}/include -I${CUW_EXTRA_DEPS}'"}
    recipe_file.write_text(yaml.safe_dump(data))
    recipe = load_recipe("example", recipes_dir)
    choice = CacheChoice("sccache", None)
    outcomes, link = run_build(recipe, paths, count=N, recipes_dir=recipes_dir, cache=choice, settings=run_settings())
    assert outcomes == [True] * N and link.verdict.ok, link.verdict.line
    facts = link.verdict.facts
    assert facts["misses"] == 0 and facts["cuda_tus"] == EXAMPLE_CUDA_TUS
    assert facts["total"] == EXAMPLE_CUDA_TUS + EXAMPLE_HOST_TUS["example"], "one request per CUDA and host TU"
    assert facts["hits"] >= facts["total"]  # sccache counts each piece of an nvcc call
    assert wheel_tu_values(link.wheel, "cuw_example", tmp_path) == expected_tu_values()
    for tarball in paths.artifacts.glob(f"*/*{archive.SUFFIX}"):
        assert archive.read_manifest(tarball).cache_tool == "sccache"

    # One archive lost: the link self-heals and names the shard's TUs.
    (gone,) = paths.artifacts.glob(f"*/*-1of3{archive.SUFFIX}")
    gone.unlink()
    again = run_link(recipe, paths, progress=None, cache=choice, settings=run_settings())
    assert not again.verdict.ok and again.missing_shards == [1]
    owned_by_1 = [
        k
        for k in (f"csrc/kernels/{p.name}" for p in (recipes_dir / "example/package/csrc/kernels").glob("*.cu"))
        if owner(k, N) == 1
    ]
    for key in owned_by_1:
        assert f"{key} <- shard 1/3 (its archive is missing)" in again.verdict.line


def test_a_ccache_link_refuses_sccache_archives(recipes_dir, paths):
    recipe = load_recipe("example", recipes_dir)
    folder = paths.artifacts / "x"
    # A real sccache-made archive is not needed to prove the refusal: the manifest decides.
    from cuw.toolchain.cache import Sccache
    from cuw.config.cell import local_cell
    from cuw.toolchain.toolkit import find_toolkit

    cell = local_cell(recipe, find_toolkit(homes=run_settings().homes))
    folder = paths.cell_artifacts(cell)
    (paths.work / "c").mkdir(parents=True)
    manifest = archive.Manifest(
        archive.FORMAT,
        "0.1.0",
        cell.to_dict(),
        1,
        2,
        "seat",
        "sccache",
        Sccache.pinned,
        None,
        [],
        [],
        {},
        fingerprint={},
        builder=current_builder(run_settings()).to_dict(),
    )
    made = archive.pack(Sccache(paths.work / "c", paths.work), manifest, folder / archive.archive_name(cell, 1, 2))
    # As its shard leaves it: the report beside it records its digest.
    archive.report_path(made).write_text(
        json.dumps({"shard": "1/2", "archive_sha256": hashlib.sha256(made.read_bytes()).hexdigest()})
    )
    with pytest.raises(CuwError, match=r"made with sccache 0.16.0; this link uses ccache"):
        run_link(recipe, paths, progress=None, cache=CacheChoice("ccache", None), settings=run_settings())


@pytest.fixture
def redis_url(tmp_path):
    server = need("redis")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while True:
        try:
            check_remote(url, timeout=0.5)
            break
        except CuwError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def _contents(wheel: Path, where: Path) -> dict[str, object]:
    """Every file's bytes, except shared libraries: two cold compiles of a TU give
    different bytes (nvcc names each anonymous namespace with a per-compile hash),
    so a library is compared by the symbols it exports."""
    out: dict[str, object] = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.endswith("RECORD"):
                continue
            if name.endswith(".so"):
                lib = where / hashlib.sha256(wheel.as_posix().encode()).hexdigest()[:8]
                lib.write_bytes(zf.read(name))
                nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
                out[name] = sorted(line.split()[-1] for line in nm.stdout.splitlines() if " T " in line)
            else:
                out[name] = hashlib.sha256(zf.read(name)).hexdigest()
    return out


# A second cold build of the cell through redis (~60 s): nox -s long. A redis remote still fires the
# shard gate in the default tier (test_gate_notes, test_gate_loopholes, test_faults).
@pytest.mark.long
def test_redis_remote_handoff_matches_the_archive_handoff(recipes_dir, tmp_path, redis_url, example_cell):
    recipe = load_recipe("example", recipes_dir)
    remote = Paths(work=tmp_path / "r" / "work", artifacts=tmp_path / "r" / "artifacts", dist=tmp_path / "r" / "dist")
    outcomes, link = run_build(
        recipe, remote, count=N, recipes_dir=recipes_dir, cache=CacheChoice("ccache", redis_url), settings=run_settings()
    )
    assert outcomes == [True] * N and link.verdict.ok, link.verdict.line
    facts = link.verdict.facts
    tus = EXAMPLE_CUDA_TUS + EXAMPLE_HOST_TUS["example"]
    assert (facts["misses"], facts["uncacheable"], facts["total"], facts["hits"]) == (0, 0, tus, tus)
    for tarball in remote.artifacts.glob(f"*/*{archive.SUFFIX}"):
        with tarfile.open(tarball) as tar:
            assert tar.getnames() == ["manifest.json"], "with a remote cache the archive is only a manifest"
        assert archive.read_manifest(tarball).cache_remote == redis_url

    # The archive handoff of the same cell: the suite's one cold build (conftest.example_cell).
    assert example_cell.count == N and example_cell.link_report()["ok"]
    ours, theirs = _contents(link.wheel, tmp_path), _contents(example_cell.wheel, tmp_path)
    assert ours == theirs
    assert "cuw_k08_launch" in ours["cuw_example/_kernels.so"]
    assert wheel_tu_values(link.wheel, "cuw_example", tmp_path) == expected_tu_values()


def test_unreachable_remote_is_a_clear_error(tmp_path, recipes_dir):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuw",
            "shard",
            "example",
            "1/2",
            "--recipes",
            str(recipes_dir),
            "--cache-remote",
            f"redis://127.0.0.1:{closed}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"remote cache redis://127.0.0.1:{closed} is unreachable" in proc.stderr
    assert not (tmp_path / "artifacts").exists()


def test_a_remote_that_never_answers_times_out(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    held = []
    threading.Thread(target=lambda: held.append(listener.accept()), daemon=True).start()
    start = time.monotonic()
    with pytest.raises(CuwError, match=r"is unreachable .*timed out"):
        check_remote(f"redis://127.0.0.1:{port}", timeout=1.0)
    assert time.monotonic() - start < 5
    listener.close()


def test_file_remote_must_exist(tmp_path):
    with pytest.raises(CuwError, match=r"is not a folder"):
        check_remote(f"file://{tmp_path}/missing")
    check_remote(f"file://{tmp_path}")


def test_a_named_cache_tool_is_never_replaced_and_a_hung_one_is_named(tmp_path, monkeypatch):
    from cuw.toolchain import cache

    from cuw.base.settings import Settings

    def named(value: str) -> cache.Cache:  # as a run's $CUW_CCACHE reaches its job's cache
        settings = Settings.from_env({"CUW_CCACHE": value})
        return cache.open_cache("ccache", tmp_path / "c", tmp_path, settings=settings)

    cache._binary.cache_clear()
    with pytest.raises(CuwError, match=r"CUW_CCACHE=.*no-such-ccache: no executable file there"):
        named(str(tmp_path / "no-such-ccache")).binary()
    hung = tmp_path / "ccache"
    hung.write_text("#!/bin/sh\nsleep 30\n")
    hung.chmod(0o755)
    monkeypatch.setattr(cache, "VERSION_TIMEOUT_S", 1.0)
    cache._binary.cache_clear()
    cache._version.cache_clear()
    with pytest.raises(CuwError, match=r"--version did not answer in 1 s"):
        named(str(hung)).binary()
    cache._binary.cache_clear()
    cache._version.cache_clear()


def test_an_nvcc_that_prints_bytes_that_are_not_utf8_or_hangs_is_read_or_named(tmp_path, monkeypatch):
    """The toolkit's version comes from `nvcc --version`: junk bytes beside the release line are
    replaced, not a crash; an nvcc that never answers is named in one line."""
    from cuw.base.errors import CuwError
    from cuw.toolchain import toolkit

    for name, script in (
        ("junk", 'printf "Cuda compilation tools, release 13.0, V13.0.88 \\377\\376\\n"'),
        ("hung", "sleep 120"),
    ):
        home = tmp_path / name
        (home / "bin").mkdir(parents=True)
        (home / "bin" / "nvcc").write_text(f"#!/bin/sh\n{script}\n")
        (home / "bin" / "nvcc").chmod(0o755)
    toolkit._version_of.cache_clear()
    monkeypatch.setenv("CUW_CUDA_HOME", str(tmp_path / "junk"))
    assert toolkit.find_toolkit(homes=run_settings().homes).version == "13.0"
    monkeypatch.setattr(toolkit.subprocess, "run", _short_timeout(toolkit.subprocess.run))
    monkeypatch.setenv("CUW_CUDA_HOME", str(tmp_path / "hung"))
    with pytest.raises(CuwError, match=r"nvcc --version did not answer in 60 s"):
        toolkit.find_toolkit(homes=run_settings().homes)
    toolkit._version_of.cache_clear()


def _short_timeout(run):
    """subprocess.run with its timeout cut to 1 s (the real 60 s would make a slow test)."""

    def call(*args, **kwargs):
        if kwargs.get("timeout"):
            kwargs["timeout"] = 1
        return run(*args, **kwargs)

    return call


def test_a_broken_user_ccache_config_is_not_read_as_a_wrong_version(monkeypatch):
    """The jobs keep the user's ccache configuration out (their own CCACHE_CONFIGPATH); the version
    probe does the same, so a broken one is not diagnosed as a wrong ccache version."""
    import tempfile

    from cuw.toolchain import cache

    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as broken:
        broken.write("max_size = lots\ngarbage line\n")
    monkeypatch.setenv("CCACHE_CONFIGPATH", broken.name)
    binary = cache.open_cache(
        "ccache", Path(tempfile.mkdtemp()) / "c", Path(tempfile.mkdtemp()), settings=run_settings()
    ).binary()
    plain = subprocess.run([binary, "--version"], capture_output=True, text=True)
    assert "missing equal sign" in plain.stdout + plain.stderr, "the broken file breaks a plain --version"
    cache._version.cache_clear()
    assert re.fullmatch(r"\d+\.\d+(\.\d+)?", cache._version(binary)), "asked as a job asks it"
    os.unlink(broken.name)
