"""The GitHub workflows, checked offline: linters, and their contract with the matrix and nox."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, need
from cuw.ci.matrix import MATRICES, RUNGS, Job, rung_key

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} is not installed (pip install -e '.[test]')")
    return str(found)


@pytest.mark.parametrize(
    "cmd",
    [
        ["actionlint"],
        ["check-jsonschema", "--builtin-schema", "vendor.github-workflows"],
        ["zizmor", "--offline"],
    ],
    ids=lambda c: c[0],
)
def test_linters_pass(cmd):
    proc = subprocess.run([_tool(cmd[0]), *cmd[1:], *map(str, WORKFLOWS)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_matrix_field_the_workflow_reads_is_one_the_generator_emits():
    emitted = {f.name for f in dataclasses.fields(Job)}
    for path in WORKFLOWS:
        read = set(re.findall(r"matrix\.(\w+)", path.read_text()))
        assert read <= emitted, f"{path.name} reads {sorted(read - emitted)} that cuw matrix never emits"
    assert {"recipe", "shard", "artifact", "kind", "lane", "cuda", "python", "torch"} <= set(
        re.findall(r"matrix\.(\w+)", (REPO / ".github/workflows/build.yml").read_text())
    )


def test_every_nox_session_the_workflows_call_exists():
    listed = subprocess.run([sys.executable, "-m", "nox", "-l"], cwd=REPO, capture_output=True, text=True).stdout
    sessions = set(re.findall(r"^[*-] (\w+) ->", listed, re.M))
    for path in WORKFLOWS:
        for called in re.findall(r"nox -s (\w+)", path.read_text()):
            assert called in sessions, f"{path.name} calls nox -s {called}, which does not exist"


def test_pages_uploads_through_the_forge_verb_and_has_no_upload_loop_of_its_own():
    """The code the tests run (tests/test_release_assets.py: `cuw upload` against a releases API
    stand-in) is the code that runs: pages.yml calls the verb, after publish and before the deploy."""
    flow = yaml.safe_load((REPO / ".github/workflows/pages.yml").read_text())
    steps = flow["jobs"]["publish"]["steps"]
    runs = [s.get("run", "") for s in steps]
    assert not any(re.search(r"\bgh\b|\bfor\b|\bwhile\b|\bcurl\b|api\.github", r) for r in runs), runs
    [upload] = [i for i, r in enumerate(runs) if "nox -s upload" in r]
    [publish] = [i for i, r in enumerate(runs) if "nox -s publish" in r]
    deploy = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/deploy-pages@"))
    assert publish < upload < deploy
    assert runs[upload].strip() == "nox -s upload -- upload site" and "--upload upload" in runs[publish]
    assert "--first" in runs[publish] and "--from-url" in runs[publish], "the first publish is checked by the forge"
    assert steps[upload]["env"] == {"GH_TOKEN": "${{ github.token }}"}


def test_shape_of_the_build_workflow():
    flow = yaml.safe_load((REPO / ".github/workflows/build.yml").read_text())
    jobs = flow["jobs"]
    assert flow["permissions"] == {}
    for name, job in jobs.items():
        assert "timeout-minutes" in job, name
        assert "permissions" in job, f"{name}: least privilege means a permissions block per job"
    assert jobs["compile"]["strategy"]["fail-fast"] is False
    assert "!cancelled()" in jobs["link"]["if"] and "success()" not in jobs["link"]["if"]
    assert set(jobs["link"]["needs"]) == {"plan", *(rung_key(k) for k in range(1, RUNGS + 1))}
    for path in WORKFLOWS:
        for uses in re.findall(r"uses: (\S+)", path.read_text()):
            assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", uses), f"{path.name}: {uses} is not pinned by SHA"


def test_linux_compile_and_link_jobs_run_in_the_lanes_image_with_its_python():
    """container: is the matrix's image (images.<lane>.ref); in it Python comes from /opt/python,
    never setup-python (the tool cache's builds need a newer glibc and would raise the floor)."""
    jobs = yaml.safe_load((REPO / ".github/workflows/build.yml").read_text())["jobs"]
    for name in MATRICES:
        job = jobs[name]
        # options: a local run's mounts, then the runner's folders for the free-disk step (tests/test_disk_need.py)
        options = "${{ vars.CUW_CONTAINER_OPTIONS }} ${{ matrix.free_disk_mounts }}"
        assert job["container"] == {"image": "${{ matrix.image }}", "options": options}
        assert job["env"]["CUW_BUILD_IMAGE"] == "${{ matrix.image }}"
        setup = [s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/setup-python@")]
        assert [s.get("if") for s in setup] == ["matrix.image == ''"], name
        image_python = [s for s in job["steps"] if s.get("name") == "Python from the build image (/opt/python)"]
        assert len(image_python) == 1 and image_python[0]["if"] == "matrix.image != ''"
        assert "/opt/python/cp" in image_python[0]["run"]


def test_ci_workflow_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    assert "nox -s tests" in readme
    # Both CI front ends run the README's command, then the long tier it leaves out.
    workflow = (REPO / ".github/workflows/ci.yml").read_text()
    assert workflow.index("run: nox -s tests") < workflow.index("run: nox -s long")
    steps = [
        line
        for line in (REPO / ".ci/run").read_text().splitlines()
        if line.startswith("nox -s tests") or line.startswith("nox -s long")
    ]
    assert steps == ["nox -s tests", "nox -s long"]


def test_the_workflow_runs_each_lane_on_the_runner_the_lanes_name():
    """cuw/config/lanes.py is the one list of lanes: the jobs' runs-on expressions name each
    lane's runner, and no other lane or runner."""
    from cuw.config.lanes import LANES

    jobs = _build_jobs()  # a rung's runs-on is an alias of the first rung's: read as GitHub reads it
    expressions = [jobs[name]["runs-on"] for name in MATRICES]
    assert all(expr.startswith("${{ matrix.lane ") for expr in expressions), expressions
    for expr in expressions:
        named = dict(re.findall(r"matrix\.lane == '([a-z0-9_]+)' && '([a-z0-9.-]+)'", expr))
        default = re.findall(r"\|\| '([a-z0-9.-]+)'\)? \}\}$", expr)
        assert default, expr
        named["linux"] = default[0]  # the lane the expression falls back to
        assert named == {name: lane.runner for name, lane in LANES.items()}, expr


def test_each_cuda_line_of_the_grid_has_a_pinned_toolkit_install():
    """recipes/defaults.yml's CUDA lines are the releases: each has a pin in both install scripts."""
    from cuw.config.policy import load_policy

    lines = load_policy(REPO / "recipes").grid.cuda
    shell = (REPO / ".github" / "scripts" / "install-cuda.sh").read_text()
    pwsh = (REPO / ".github" / "scripts" / "install-cuda.ps1").read_text()
    for line in lines:
        assert re.search(rf"^\s*{re.escape(line)}\) full=", shell, re.M), f"install-cuda.sh has no pin for CUDA {line}"
        assert f'"{line}"' in pwsh, f"install-cuda.ps1 has no pin for CUDA {line}"


def test_shard_archives_upload_without_a_second_compression():
    steps = yaml.safe_load((REPO / ".github/workflows/build.yml").read_text())["jobs"]["compile"]["steps"]
    (upload,) = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@") and "shard" in s["if"]]
    assert upload["with"]["compression-level"] == 0  # the archive is a tar of already-compressed entries


def test_every_input_a_workflow_passes_is_one_the_pinned_action_declares():
    folder = need("offline-actions")
    for path in WORKFLOWS:
        for job in yaml.safe_load(path.read_text())["jobs"].values():
            for step in job.get("steps", []):
                owner_name, _, sha = step.get("uses", "").partition("@")
                if not sha:
                    continue
                copy = folder / f"{owner_name.replace('/', '-')}@{sha}" / "action.yml"
                if not copy.is_file() and path.name != "build.yml":
                    continue  # only build.yml runs here (act): the Pages actions of pages.yml have no offline copy
                declared = yaml.safe_load(copy.read_text())
                unknown = set(step.get("with", {})) - set(declared.get("inputs", {}))
                assert not unknown, f"{path.name}: {step['uses']} has no input {sorted(unknown)}"


def test_act_reads_the_workflow_less_only_the_keys_its_schema_refuses():
    """act 0.2.89 refuses `concurrency.queue`; the copy act reads drops that line and nothing else."""
    from cuw.ci.workflow_run import act_readable

    text = (REPO / ".github/workflows/build.yml").read_text()
    readable, dropped = act_readable(text)
    assert dropped == ["concurrency.queue"]
    kept = [line for line in text.splitlines() if line.strip() != "queue: max"]
    assert readable.splitlines() == kept
    assert yaml.safe_load(readable)["jobs"]["publish"]["concurrency"] == {"group": "publish-index", "cancel-in-progress": False}
    same = "on: push\njobs:\n  a:\n    steps:\n      - with:\n          queue: 3\n"  # a `queue` elsewhere stays
    assert act_readable(same) == (same, [])


# -- the ladder: rungs of one job body, the job cap written once ------------------------------


def _build_jobs() -> dict:
    return yaml.safe_load((REPO / ".github/workflows/build.yml").read_text())["jobs"]


RUNG_OWN = ("needs", "if", "name", "strategy")
"""What a rung has of its own; the rest of its job is the one body the first rung writes."""


def _job_nodes(path: Path) -> dict[str, dict[str, yaml.Node]]:
    """Each job's keys as composed YAML nodes: an alias is its anchor's node (the same object)."""
    root = yaml.compose(path.read_text(), Loader=yaml.SafeLoader)
    jobs = next(value for key, value in root.value if key.value == "jobs")
    return {job.value: {key.value: value for key, value in body.value} for job, body in jobs.value}


def test_the_rungs_are_one_job_body_written_once():
    """build.yml writes the rungs' body once: rung `compile` anchors each key of it and every later
    rung names those anchors, so a change to the body (a step, the env, the container) is a change
    to every rung and no rung's copy can drift; a rung writes only its own keys."""
    nodes = _job_nodes(REPO / ".github/workflows/build.yml")
    first = nodes[rung_key(1)]
    body = [key for key in first if key not in RUNG_OWN]
    assert {"runs-on", "container", "timeout-minutes", "permissions", "defaults", "env", "steps"} <= set(body)
    for k in range(2, RUNGS + 1):
        rung = nodes[rung_key(k)]
        assert set(rung) == set(RUNG_OWN) | set(body), rung_key(k)
        for key in body:
            assert rung[key] is first[key], f"{rung_key(k)}.{key} is written again, not an alias of {rung_key(1)}'s"
    text = (REPO / ".github/workflows/build.yml").read_text()
    assert text.count("- name: Compile shard") == 1 and text.count("install-forge.sh") == 4  # plan, the rungs, link, publish


def test_the_rungs_are_one_job_body_each_after_the_one_before():
    """cuw/ci/matrix.py RUNGS is the workflow's rungs: compile, compile_2, ...; each the compile job
    but for what orders it (needs, if), its name and the matrix it reads."""
    jobs = _build_jobs()
    rungs = [name for name in jobs if re.fullmatch(r"compile(_\d+)?", name)]
    assert rungs == [rung_key(k) for k in range(1, RUNGS + 1)]
    own = RUNG_OWN
    body = {k: v for k, v in jobs["compile"].items() if k not in own}
    outputs = jobs["plan"]["outputs"]
    for k in range(1, RUNGS + 1):
        job = jobs[rung_key(k)]
        assert {key: v for key, v in job.items() if key not in own} == body, rung_key(k)
        assert job["strategy"] == {"fail-fast": False, "matrix": f"${{{{ fromJSON(needs.plan.outputs.{rung_key(k)}) }}}}"}
        assert f"needs.plan.outputs.has_{rung_key(k)} == 'true'" in job["if"]
        assert outputs[rung_key(k)] == f"${{{{ steps.plan.outputs.{rung_key(k)} }}}}"
        assert outputs[f"has_{rung_key(k)}"] == f"${{{{ steps.plan.outputs.has_{rung_key(k)} }}}}"
        if k > 1:  # after the rung before; a sibling's failure does not stop a part
            assert job["needs"] == ["plan", rung_key(k - 1)] and "!cancelled()" in job["if"]
            assert job["name"].startswith("continue "), "a continuation is named apart from the shards' first parts"
    steps = {s.get("name"): s for s in jobs["compile"]["steps"]}
    download = steps["Download the part before (a continuation)"]
    assert download["if"] == "matrix.resume != ''" and download["with"] == {"name": "${{ matrix.resume }}", "path": "resume"}
    compile_run = steps["Compile shard"]["run"]
    assert '--deadline "$(( $(date +%s) + DEADLINE_S ))"' in compile_run and "resume/cuw-shard-*.tar" in compile_run
    assert '--resume "${archives[0]}"' in compile_run
    assert jobs["compile"]["env"]["DEADLINE_S"] == "${{ matrix.deadline_s }}"


def test_the_job_limit_is_the_policys_on_every_compile_and_link_job():
    """jobs.limit_minutes in recipes/defaults.yml is every rung's and the link's timeout-minutes."""
    from cuw.config.policy import load_policy

    limit = load_policy(REPO / "recipes").jobs.limit_minutes
    jobs = _build_jobs()
    assert {name: jobs[name]["timeout-minutes"] for name in MATRICES} == {name: limit for name in MATRICES}


def test_the_plan_job_outputs_every_matrix_of_a_chunk(tmp_path):
    """chunk_outputs.py writes a matrix and its has_ flag per matrix of the chunk; the plan job passes each on."""
    chunk = tmp_path / "chunk.json"
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuw",
            "matrix",
            "--package",
            "example",
            "--chunk",
            "example-linux-cu13.0",
            "--output",
            str(chunk),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert made.returncode == 0, made.stderr
    printed = subprocess.run(
        [sys.executable, str(REPO / ".github/scripts/chunk_outputs.py"), str(chunk)], capture_output=True, text=True
    )
    assert printed.returncode == 0, printed.stderr
    written = dict(line.split("=", 1) for line in printed.stdout.splitlines())
    assert set(written) == {*MATRICES, *(f"has_{m}" for m in MATRICES)} == set(_build_jobs()["plan"]["outputs"])
    assert written["has_compile"] == "true" and written["has_compile_2"] == "false"


def _compile_step(tmp_path: Path, resume: str, left: "list[str] | None") -> tuple[subprocess.CompletedProcess, list[str]]:
    """build.yml's "Compile shard" step, run by bash as the runner runs it, with a stub nox that
    records its arguments; ``left``: the TUs the part before left (None: no part before)."""
    step = next(s for s in _build_jobs()["compile"]["steps"] if s.get("name") == "Compile shard")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "nox").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$NOX_ARGS"\n')
    (bin_dir / "nox").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    if left is not None:  # a shard archive: its manifest (part, partial, left) and a cache entry
        (tmp_path / "resume").mkdir()
        with tarfile.open(tmp_path / "resume" / "cuw-shard-c-2of4.tar", "w") as tar:
            for name, data in (
                ("manifest.json", json.dumps({"part": 1, "partial": bool(left), "left": left}).encode()),
                ("cache/0/a", b"entry"),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        (tmp_path / "resume" / "cuw-shard-c-2of4.report.json").write_text(json.dumps({"ok": True}))
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "NOX_ARGS": str(tmp_path / "nox-args"),
        "RECIPE": "example",
        "SHARD": "2/4",
        "CELL": "c",
        "FAIL_SHARD": "",
        "DEADLINE_S": "3885",
        "RESUME": resume,
        "PART": "2" if resume else "1",
    }
    run = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    args = (tmp_path / "nox-args").read_text().splitlines() if (tmp_path / "nox-args").exists() else []
    return run, args


def test_the_compile_step_resumes_the_part_before_or_hands_a_finished_one_on(tmp_path):
    """Part 1: the shard with its deadline (a Unix time: the step's start plus deadline_s). A later
    part: --resume the archive of the part before while its manifest is partial; a part before
    that finished the shard (the chain is a safe bound) is handed on as it is, nox never runs."""
    started = time.time()
    first, args = _compile_step(tmp_path / "first", "", None)
    assert first.returncode == 0, first.stderr
    assert args[:4] == ["-s", "shard", "--", "example"] and args[4:6] == ["2/4", "--deadline"] and len(args) == 7
    assert int(started) + 3885 <= int(args[6]) <= time.time() + 3885  # date +%s: whole seconds
    resumed, args = _compile_step(tmp_path / "resumed", "cuw-part1-c-2of4", ["csrc/a.cu"])
    assert resumed.returncode == 0, resumed.stderr
    assert args[4:] == ["2/4", "--deadline", args[6], "--resume", "resume/cuw-shard-c-2of4.tar"]
    finished, args = _compile_step(tmp_path / "finished", "cuw-part1-c-2of4", [])
    assert finished.returncode == 0 and args == [], finished.stderr
    assert "the part before finished it; its archive goes on as part 2" in finished.stdout
    handed = sorted(p.name for p in (tmp_path / "finished" / "artifacts").iterdir())
    assert handed == ["cuw-shard-c-2of4.report.json", "cuw-shard-c-2of4.tar"]
    assert (tmp_path / "finished" / "artifacts" / "cuw-shard-c-2of4.tar").read_bytes() == (
        tmp_path / "finished" / "resume" / "cuw-shard-c-2of4.tar"
    ).read_bytes()
    missing, args = _compile_step(tmp_path / "missing", "cuw-part1-c-2of4", None)
    assert missing.returncode == 2 and args == [] and "holds 0 shard archives, not 1" in missing.stderr


# -- ci.yml: what .ci/run runs, side by side ------------------------------------------------------


def _ci_run_lines() -> list[str]:
    """.ci/run's commands: its lines less comments."""
    return [line.split(" #")[0] for line in (REPO / ".ci/run").read_text().splitlines() if not line.lstrip().startswith("#")]


def _apt_packages(text: str) -> set[str]:
    """Every package an ``apt-get install`` line names (continuation lines joined)."""
    joined = text.replace("\\\n", " ")
    return {
        word
        for line in re.findall(r"apt-get install ([^\n>|&;]*)", joined)
        for word in line.split()
        if not word.startswith("-") and "=" not in word
    }


def _ci_run_sessions() -> list[tuple[str, str]]:
    """(session, $CUW_REQUIRE as .ci/run has it then) for each ``nox -s`` of .ci/run, in its order."""
    require, found = "", []
    for line in _ci_run_lines():
        export = re.search(r"export CUW_REQUIRE=\"?([^\"\s]+)\"?", line)
        if export:
            require = export.group(1).replace("$CUW_REQUIRE", require)
        found += [(session, require) for session in re.findall(r"\bnox -s (\w+)", line)]
    return found


def test_ci_workflow_runs_what_ci_run_runs_in_jobs_side_by_side():
    """GitHub's ci.yml and .ci/run are the two CI front ends: the same nox sessions (lint, docs, the
    image, the test tiers), each tier under the CUW_REQUIRE .ci/run sets for it, the same packages
    installed; on GitHub each heavy step is a job of its own, none waiting on another, each with its
    timeout and least privilege."""
    path = REPO / ".github/workflows/ci.yml"
    assert path in WORKFLOWS, "ci.yml is linted with the others (test_linters_pass)"
    flow = yaml.safe_load(path.read_text())
    jobs = flow["jobs"]
    assert flow["permissions"] == {}
    for name, job in jobs.items():
        assert "needs" not in job, f"{name} waits on {job['needs']}: the jobs run side by side"
        assert job.get("timeout-minutes", 0) <= 90 and job["permissions"] == {"contents": "read"}, name
    runs = {name: "\n".join(str(s.get("run", "")) for s in job["steps"]) for name, job in jobs.items()}
    sessions = {name: re.findall(r"\bnox -s (\w+)", text) for name, text in runs.items()}
    ci_run = _ci_run_sessions()
    assert sorted(s for found in sessions.values() for s in found) == sorted(s for s, _ in ci_run), (sessions, ci_run)
    assert {name for name, found in sessions.items() if len(found) > 1} <= {"tests"}, "one heavy step a job"
    assert sessions["tests"] == ["image", "tests"], "the stand-in image before the timed tests, as .ci/run has it"
    required = dict(ci_run)
    for name, job in jobs.items():
        env = {**flow.get("env", {}), **job.get("env", {})}
        for session in sessions[name]:
            if required[session]:  # a test tier: what .ci/run requires when it runs it
                assert env.get("CUW_REQUIRE") == required[session], f"{name}: nox -s {session}"
    ci_run_packages = _apt_packages((REPO / ".ci/run").read_text())
    for name in ("tests", "long"):
        assert _apt_packages(runs[name]) == ci_run_packages - {"docker.io"}, f"{name}: docker is the runner's own"
    for name, text in runs.items():
        if any(required[s] for s in sessions[name]):
            extras = re.search(r"pip install -e '\.\[([\w,]+)\]'", text)
            assert extras and {"test", "torch"} <= set(extras.group(1).split(",")), f"{name}: {text}"
            assert "install-cuda.sh 13.0" in text, name


def test_pages_yanks_by_hand_through_the_forge_verb_and_deploys_in_the_publish_group(tmp_path):
    """workflow_dispatch (wheel, reason, undo) runs `nox -s yank` continued from the site and the
    publish job's own deploy steps, in the publish-index group; the inputs reach the shell through
    env only, and the arguments the step builds are the verb's, checked by running it with a nox stand-in."""
    flow = yaml.safe_load((REPO / ".github/workflows/pages.yml").read_text())
    dispatch = flow[True]["workflow_dispatch"]["inputs"]  # YAML 1.1 reads the key `on` as True
    assert set(dispatch) == {"wheel", "reason", "undo"} and dispatch["undo"]["type"] == "boolean"
    [job] = flow["jobs"].values()  # one job: a publish and a yank share every step but their own
    assert job["concurrency"]["group"] == "publish-index" and job["concurrency"]["cancel-in-progress"] is False
    assert "github.event_name == 'workflow_dispatch'" in job["if"]
    steps = job["steps"]
    [yank] = [i for i, s in enumerate(steps) if "nox -s yank" in s.get("run", "")]
    assert steps[yank]["if"] == "github.event_name == 'workflow_dispatch'"
    assert set(steps[yank]["env"]) == {"PAGES_URL", "WHEEL", "REASON", "UNDO"}
    assert all("${{" not in s.get("run", "") for s in steps), "an input or expression reaches the shell outside env:"
    artifact = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/upload-pages-artifact@"))
    deploy = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/deploy-pages@"))
    assert yank < artifact < deploy and steps[artifact]["with"]["path"] == "site"
    # What runs on a dispatch: every step not kept to workflow_run (the build run's artifacts, publish, upload).
    ran = [i for i, s in enumerate(steps) if "workflow_run" not in s.get("if", "")]
    assert ran == [0, 1, 2, yank, artifact, deploy], [steps[i].get("name", steps[i].get("uses")) for i in ran]
    assert [steps[i].get("uses", steps[i].get("run", "")).split("@")[0] for i in ran[:3]] == [
        "actions/checkout",
        "actions/setup-python",
        ".github/scripts/install-forge.sh",
    ]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nox").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$NOX_ARGS"\n')
    (fake / "nox").chmod(0o755)
    for undo, reason, expected in (
        ("false", "broken on sm_90 (issue 12)", ["--reason", "broken on sm_90 (issue 12)"]),
        ("true", "", ["--undo"]),
    ):
        env = {"PATH": f"{fake}:/usr/bin:/bin", "NOX_ARGS": str(tmp_path / "args"), "PAGES_URL": "https://o.github.io/farm"}
        env |= {"WHEEL": "x-1.0+cu130-py3-none-any.whl", "REASON": reason, "UNDO": undo}
        subprocess.run(["bash", "-e", "-c", steps[yank]["run"]], env=env, check=True, timeout=30)
        said = (tmp_path / "args").read_text().splitlines()
        assert said == [
            "-s",
            "yank",
            "--",
            "x-1.0+cu130-py3-none-any.whl",
            "--index",
            "site",
            "--from-url",
            env["PAGES_URL"],
            *expected,
        ]
