"""Jobs in a build image: the stand-in built by `cuw image`, the example's shards and link each in
a container of it, the floor the wheel gets, and a handoff across builders refused.

Needs a container engine that answers (`.ci/run` installs docker.io and starts dockerd) and the
stand-in image (`.ci/run` builds it before the tests; the fixture builds it when missing, once
per run under a lock). Without an engine the container cases are skipped, saying why.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from conftest import REPO, engine_or_skip, need, run_cuw, run_in_container, run_settings, trim_example
from cuw.base.errors import CuwError, InputError, ToolError
from cuw.base.files import held
from cuw.config.policy import BuildImage, check_image_policy
from cuw.toolchain.builder import Builder, current_builder, floor_for
from cuw.toolchain.engine import check_ref
from cuw.config.lanes import linux_lane
from cuw.jobs import archive
from cuw.jobs.container import open_image
from cuw.toolchain.image_build import default_recipe, dockerfile, load_image_recipe

# Under nox -s tests (--dist loadfile) the whole file runs on one worker: the stand-in image is asked
# for once per run (the session fixture below), the example built in it once (the module fixture).
pytestmark = pytest.mark.xdist_group("build-image")


@pytest.fixture(scope="session")
def standin(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The stand-in's reference, from `cuw image` (cached by its recipe's digest)."""
    engine_or_skip()
    with held(tmp_path_factory.getbasetemp().parent / "standin-image.lock"):
        proc = run_cuw("image", timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("image: "), proc.stdout
    return last.split(" ", 1)[1]


KEPT = 3  # the example's kernel TUs built in the image: what runs there is the subject, not how many


class InImage(NamedTuple):
    root: Path
    proc: subprocess.CompletedProcess
    recipes: list[str]
    """``--recipes`` and the private copy the build used (the example trimmed to KEPT kernel TUs)."""
    tu_values: dict[str, int]
    """What the wheel's tu_values() must give."""


@pytest.fixture(scope="module")
def built_in_image(standin: str, tmp_path_factory: pytest.TempPathFactory) -> InImage:
    root = tmp_path_factory.mktemp("in-image")
    shutil.copytree(REPO / "recipes", root / "recipes", symlinks=True)
    values = trim_example(root / "recipes", KEPT)
    recipes = ["--recipes", str(root / "recipes")]
    folders = ["--work", str(root / "work"), "--artifacts", str(root / "artifacts"), "--dist", str(root / "dist")]
    proc = run_cuw("build", "example", "--shards", "3", "--image", standin, *recipes, *folders, "--jobs", "2")
    return InImage(root, proc, recipes, values)


def test_the_example_builds_in_the_image_each_job_in_its_own_container(built_in_image, standin):
    root, proc = built_in_image.root, built_in_image.proc
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    # Three shards and the link, each in a container of its own (named by the process that ran it).
    containers = re.findall(r"(shard \d/3|link): in image \S+ \(\w+, container (\S+)\)", out)
    assert sorted(kind for kind, _ in containers) == ["link", "shard 1/3", "shard 2/3", "shard 3/3"], out[-3000:]
    assert len({name for _, name in containers}) == 4
    (wheel,) = (root / "dist").glob("*.whl")
    link = json.loads(wheel.with_name(wheel.name + ".link.json").read_text())
    assert link["ok"] and link["facts"]["misses"] == 0 and link["facts"]["total"] > 0
    # Every shard compiled in the image: its glibc and compiler, not this machine's.
    for report in (root / "artifacts").glob("*/cuw-shard-*.tar"):
        manifest = json.loads(
            subprocess.run(["tar", "-xOf", str(report), "manifest.json"], capture_output=True, check=True).stdout
        )
        builder = manifest["builder"]
        assert builder["image"].startswith(standin + "@sha256:") and builder["glibc"] == "2.31"
        assert builder["floor"] == "manylinux_2_31_x86_64" and "10." in builder["compiler"]
        assert builder["compiler"] != current_builder(run_settings()).compiler


def test_the_wheel_is_at_the_image_floor_and_auditwheel_agrees(built_in_image):
    root = built_in_image.root
    (wheel,) = (root / "dist").glob("*.whl")
    tags = wheel.name[:-4].rsplit("-", 1)[1].split(".")
    assert tags[-1] == "manylinux_2_31_x86_64"  # the builder's floor, the highest tag it claims
    lowest = min(tags, key=lambda t: [int(n) for n in re.findall(r"\d+", t)])
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "auditwheel"), "show", str(wheel)], capture_output=True, text=True, check=True
    ).stdout
    assert f'consistent with the following platform tag: "{lowest}"' in " ".join(shown.split()), shown
    # The build record carries the builder and its floor.
    proc = run_cuw(
        "record", "example", *built_in_image.recipes, "--dist", str(root / "dist"), "--artifacts", str(root / "artifacts")
    )
    assert proc.returncode == 0, proc.stderr
    body = json.loads(wheel.with_name(wheel.name + ".build.json").read_text())
    assert body["builder"]["floor"] == "manylinux_2_31_x86_64" and body["builder"]["glibc"] == "2.31"


def test_the_wheel_installs_and_imports_in_a_clean_container_of_the_image(built_in_image, standin):
    root = built_in_image.root
    (wheel,) = (root / "dist").glob("*.whl")
    engine = engine_or_skip()
    script = (
        f"/opt/python/cp311-cp311/bin/python -m pip install -q --no-deps --no-index /dist/{wheel.name} && "
        "cd / && /opt/python/cp311-cp311/bin/python -c 'import json, cuw_example as m; print(json.dumps(m.tu_values()))'"
    )
    proc = run_in_container(engine, standin, "-v", f"{root / 'dist'}:/dist:ro", "--", "sh", "-c", script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == built_in_image.tu_values


def test_a_shard_built_on_the_host_is_refused_by_a_link_in_the_image(built_in_image, example_cell, standin, tmp_path):
    """The builder is checked first, before what the archives were compiled from: the host's shard 2/3
    is of the whole example, the image's of the trimmed one."""
    root = built_in_image.root
    artifacts = tmp_path / "artifacts"
    shutil.copytree(root / "artifacts", artifacts)
    (cell,) = [p.name for p in artifacts.iterdir()]
    host_archive = example_cell.paths.artifacts / cell / f"cuw-shard-{cell}-2of3.tar"
    shutil.copy(host_archive, artifacts / cell / host_archive.name)  # shard 2 now comes from the host,
    shutil.copy(archive.report_path(host_archive), archive.report_path(artifacts / cell / host_archive.name))  # its report too
    work = tmp_path / "work"
    proc = run_cuw(
        "link",
        "example",
        *built_in_image.recipes,
        "--image",
        standin,
        "--work",
        str(work),
        "--artifacts",
        str(artifacts),
        "--dist",
        str(tmp_path / "dist"),
    )
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert "shard 2/3 was compiled on the host (glibc " in last and f"this link runs in image {standin}" in last, last
    assert "Traceback" not in proc.stderr
    assert not (work / cell / "link").exists()  # refused before the link's folder was made
    # And the other way round: the image's shards refused by a link on the host.
    proc = run_cuw(
        "link",
        "example",
        *built_in_image.recipes,
        "--work",
        str(work),
        "--artifacts",
        str(root / "artifacts"),
        "--dist",
        str(tmp_path / "d2"),
    )
    assert proc.returncode == 2 and "was compiled in image" in proc.stderr and "this link runs on the host" in proc.stderr


def test_a_second_run_of_the_same_job_in_an_image_is_refused(built_in_image, standin, tmp_path):
    """Inside, the forge cannot see another container's pid: the host's lock refuses the second run."""
    import fcntl

    root = built_in_image.root
    (cell,) = [p.name for p in (root / "artifacts").iterdir()]
    lock = root / "work" / cell / ".shard-2of3.image.lock"
    with open(lock, "a+b") as held_lock:
        fcntl.flock(held_lock, fcntl.LOCK_EX)
        proc = run_cuw(
            "shard",
            "example",
            "2/3",
            *built_in_image.recipes,
            "--image",
            standin,
            "--work",
            str(root / "work"),
            "--artifacts",
            str(tmp_path / "a"),
        )
    assert proc.returncode == 2 and "in a container is already running" in proc.stderr, proc.stderr
    assert not (tmp_path / "a" / cell).exists()


def test_image_verb_is_cached_by_its_recipe_digest(standin):
    proc = run_cuw("image")
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1] == f"image: {standin}"
    assert "already built" in proc.stderr
    assert standin.endswith(":" + load_image_recipe(default_recipe()).digest()[:16])
    job = open_image(standin, settings=run_settings())  # the machine its programs run on, from the engine
    assert job.machine == "x86_64" and job.lane == "linux" and not job.foreign


def test_a_missing_image_or_engine_is_one_line(tmp_path):
    engine_or_skip()
    proc = run_cuw(
        "shard",
        "example",
        "1/3",
        "--image",
        "cuw-no-such-image:0",
        "--work",
        str(tmp_path / "w"),
        "--artifacts",
        str(tmp_path / "a"),
    )
    assert proc.returncode == 2 and "has no such image" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "w").exists() and not (tmp_path / "a").exists()  # refused before any folder
    proc = run_cuw(
        "shard", "example", "1/3", "--image", "--bad", "--work", str(tmp_path / "w"), "--artifacts", str(tmp_path / "a")
    )
    assert proc.returncode == 2
    proc = run_cuw(
        "shard", "example", "1/3", "--engine", "podman", "--work", str(tmp_path / "w"), "--artifacts", str(tmp_path / "a")
    )
    assert proc.returncode == 2 and "--engine goes with --image" in proc.stderr


# What needs no engine: the floor rule, the policy, the image recipe, the builder comparison.


def test_the_floor_is_the_builders_glibc():
    assert floor_for("2.31", "x86_64") == "manylinux_2_31_x86_64"
    assert floor_for("2.28", "aarch64") == "manylinux_2_28_aarch64"
    assert floor_for("2.36", "x86_64") == "manylinux_2_36_x86_64"
    assert floor_for("2.30", "x86_64") == "manylinux_2_31_x86_64"  # no 2_30 policy: the next one up
    here = current_builder(run_settings())
    assert here.image is None and here.floor == floor_for(here.glibc, here.arch)


def test_builders_compare_by_image_id_or_by_host_toolchain():
    a = Builder("cuw-standin:1@sha256:" + "a" * 64, "x86_64", "2.31", "3.4.28", "g++ 10")
    same_id = Builder("sha256:" + "a" * 64 + "@sha256:" + "a" * 64, "x86_64", "2.31", "3.4.28", "g++ 10")
    other = Builder("cuw-standin:2@sha256:" + "b" * 64, "x86_64", "2.31", "3.4.28", "g++ 10")
    host = Builder(None, "x86_64", "2.36", "3.4.30", "g++ 12")
    assert a.same_as(same_id) and not a.same_as(other) and not a.same_as(host) and not host.same_as(a)
    assert host.same_as(Builder(None, "x86_64", "2.36", "3.4.30", "g++ 12"))
    assert not host.same_as(Builder(None, "x86_64", "2.36", "3.4.30", "g++ 13"))
    assert Builder.from_dict(a.to_dict(), "x") == a
    with pytest.raises(InputError, match="builder record is missing"):
        Builder.from_dict(None, "an archive")


def test_the_policy_pins_each_lane_image_by_digest():
    good = "quay.io/pypa/manylinux_2_28_x86_64@sha256:" + "1" * 64
    check_image_policy("linux", BuildImage(good, "manylinux_2_28_x86_64"), "images.linux")
    with pytest.raises(CuwError, match="pin the image by digest"):
        check_image_policy("linux", BuildImage("quay.io/pypa/manylinux_2_28_x86_64:latest", "manylinux_2_28_x86_64"), "i")
    with pytest.raises(CuwError, match="manylinux_X_Y_aarch64"):
        check_image_policy("linux_aarch64", BuildImage(good, "manylinux_2_28_x86_64"), "i")
    with pytest.raises(CuwError, match="only Linux lanes"):
        check_image_policy("windows", BuildImage(good, "manylinux_2_28_x86_64"), "i")


def test_an_image_recipe_is_read_strictly(tmp_path):
    text = default_recipe().read_text()
    bad = tmp_path / "bad.yml"
    bad.write_text(text + "platforms: [x]\n")
    with pytest.raises(InputError, match="unknown key"):
        load_image_recipe(bad)
    bad.write_text(text.replace("sha256: 2411", "sha256: zz11"))
    with pytest.raises(InputError, match="sha256 of 64 hex digits"):
        load_image_recipe(bad)
    bad.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(CuwError, match="not a text file"):
        load_image_recipe(bad)
    with pytest.raises(CuwError, match="no such file"):
        load_image_recipe(tmp_path / "missing.yml")
    for ref in ("--rm", "a b", "", "UPPER:case"):
        with pytest.raises(InputError, match="not an image reference"):
            check_ref(ref)
    assert check_ref("cuw-standin-x86_64:9c5af190a04c1042") and check_ref("sha256:" + "0" * 64)


def test_an_image_recipe_may_take_debians_own_python(tmp_path):
    arm = load_image_recipe(REPO / "images" / "standin-aarch64.yml")
    (python,) = arm.pythons
    assert arm.arch == "aarch64" and python.debian == "python3.11" and not python.url
    assert "ln -s /usr/bin/python3.11 /opt/python/cp311-cp311/bin/python3" in dockerfile(arm, "base")
    text = (REPO / "images" / "standin-aarch64.yml").read_text()
    bad = tmp_path / "bad.yml"
    bad.write_text(text.replace("debian: python3.11", "debian: python3.12"))
    with pytest.raises(CuwError, match=r"python.cp311-cp311.debian must be python3.11"):
        load_image_recipe(bad)
    bad.write_text(text.replace("python3.11, ", ""))
    with pytest.raises(CuwError, match="listed in packages"):
        load_image_recipe(bad)
    bad.write_text(text.replace("debian: python3.11", "debian: python3.11\n    url: http://x/y.tgz"))
    with pytest.raises(CuwError, match="with url and sha256, or with debian"):
        load_image_recipe(bad)


def test_lanes_follow_the_machine_an_image_runs_on():
    assert linux_lane("aarch64") == linux_lane("arm64") == "linux_aarch64"
    assert linux_lane("x86_64") == linux_lane("amd64") == "linux"


def test_a_runner_image_links_its_pythons_into_the_tool_cache(tmp_path):
    runner = load_image_recipe(REPO / "images" / "runner-x86_64.yml")
    assert runner.tool_cache == "/opt/hostedtoolcache" and [p.debian for p in runner.pythons] == ["python3.11"]
    steps = dockerfile(runner, "base")
    assert "/opt/hostedtoolcache/Python/$v/x64" in steps and "x64.complete" in steps
    assert "hostedtoolcache" not in dockerfile(load_image_recipe(default_recipe("x86_64")), "base")
    bad = tmp_path / "bad.yml"
    for value in ("relative/path", "/a b", "[1]"):
        bad.write_text(
            (REPO / "images" / "runner-x86_64.yml")
            .read_text()
            .replace("tool_cache: /opt/hostedtoolcache", f"tool_cache: {value}")
        )
        with pytest.raises(InputError, match="tool_cache must be an absolute folder path"):
            load_image_recipe(bad)


def test_a_local_image_is_pinned_by_digest_through_the_local_registry(tmp_path):
    """What `cuw workflow --engine docker` gives the plan: a digest reference the engine resolves
    without a pull, to the very image that was pushed."""
    from cuw.toolchain.registry import local_registry, pin

    engine = need("engine", "registry")
    root = tmp_path / "root"
    root.mkdir()
    (root / "hello").write_text("a tiny image\n")
    ref = f"cuw-registry-probe:{tmp_path.name[-12:].lower().replace('_', '-')}"
    tar = subprocess.run(["tar", "-C", str(root), "-c", "."], capture_output=True, check=True).stdout
    subprocess.run([engine.path, "import", "-", ref], input=tar, capture_output=True, check=True)
    said: list[str] = []
    pushed: list[str] = []  # the tag pin pushed from: the engine's store keeps it, and the test removes it
    try:
        with local_registry(tmp_path / "registry", said.append) as registry:
            pushed.append(f"{registry.host}/{ref}")
            pinned = pin(engine, registry, ref, said.append)
            port = int(registry.host.rsplit(":", 1)[1])
        assert re.fullmatch(rf"127\.0\.0\.1:{port}/cuw-registry-probe@sha256:[0-9a-f]{{64}}", pinned), pinned
        check_image_policy("linux", BuildImage(pinned, "manylinux_2_31_x86_64"), "pinned")  # the form the policy pins
        from cuw.toolchain.engine import image_id

        assert image_id(engine, pinned) == image_id(engine, ref)  # resolved here, the registry stopped
        import socket

        with pytest.raises(OSError):  # the registry is stopped with the block
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    finally:
        subprocess.run([engine.path, "rmi", "-f", ref, *pushed], capture_output=True)
    with pytest.raises(ToolError, match="cannot push"):
        with local_registry(tmp_path / "registry", said.append) as registry:
            pin(engine, registry, "cuw-no-such-image:absent", said.append)


def test_the_free_disk_step_empties_the_runners_folders_mounted_into_a_job_in_the_image(standin, tmp_path):
    """A job in the build image frees the runner's disk as the workflow runs it: the container gets the
    matrix's mounts (here with the runner's folders under a temporary root), the script empties each
    folder through its mount, the mount points stay, and nothing beside them is touched."""
    import shlex

    from cuw.partition.disk_need import FREE_DISK_FOLDERS, container_mounts

    engine = engine_or_skip()
    host = tmp_path / "runner"
    for folder in FREE_DISK_FOLDERS[:-1]:  # the last is one this runner image no longer has: left alone
        (host / folder.lstrip("/") / "sdk" / "bin").mkdir(parents=True)
        (host / folder.lstrip("/") / "sdk" / "bin" / "tool").write_bytes(b"x" * 4096)
        (host / folder.lstrip("/") / ".hidden").write_text("y")
    keep = host / "usr" / "share" / "keep.txt"
    keep.write_text("not the forge's to free")
    missing = host / FREE_DISK_FOLDERS[-1].lstrip("/")
    mounts = shlex.split(container_mounts(str(host)))
    scripts = f"{REPO / '.github' / 'scripts'}:/scripts:ro"
    proc = run_in_container(engine, standin, *mounts, "-v", scripts, "--", "bash", "/scripts/free-disk.sh")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.count("Filesystem") == 2 and "before:" in proc.stdout and "after:" in proc.stdout
    for folder in FREE_DISK_FOLDERS:
        mounted = host / folder.lstrip("/")
        assert mounted.is_dir() and list(mounted.iterdir()) == [], folder
    assert keep.read_text() == "not the forge's to free"
    # The engine made the mount's source for the folder the runner lacked: empty, as it was.
    assert missing.is_dir() and not any(missing.iterdir())


def test_the_image_env_script_hands_pip_every_requirement_word_for_word(tmp_path):
    """Run by a real shell with a stand-in Python that records the words pip would get: a marker's own
    quotes (``python_version < '3.11'``) reach pip intact, as do the forge's pinned requirements."""
    from cuw.jobs.cell_env import forge_requirements
    from cuw.jobs.container import env_script

    words = tmp_path / "words.json"
    pip = f"#!{sys.executable}\nimport json, sys\nopen({str(words)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    python = tmp_path / "opt python" / "python"  # a space in the path as well
    python.parent.mkdir()
    python.write_text(
        f"#!{sys.executable}\nimport os, sys\nassert sys.argv[1:3] == ['-m', 'venv'], sys.argv\n"
        f"os.makedirs(sys.argv[3] + '/bin')\nopen(sys.argv[3] + '/bin/python', 'w').write({pip!r})\n"
        "os.chmod(sys.argv[3] + '/bin/python', 0o755)\n"
    )
    python.chmod(0o755)
    requirements = [*forge_requirements(), "tomli>=2; python_version < '3.11'", 'x; sys_platform == "linux"']
    proc = subprocess.run(
        ["sh", "-c", env_script(str(python), tmp_path / "env it's", requirements)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(words.read_text()) == ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", *requirements]
