"""``cuw gpu``: wheels proven where they run, on a GPU.

For each wheel given (files, folders searched for ``*.whl``, or an index folder or URL with a
package filter): an environment of its own (a venv without pip that still sees the machine's
site-packages, so the machine's own torch, too big to carry, is the one the wheel meets), the wheel
installed into it with ``pip install --no-deps --no-index`` (nothing fetched, nothing built), then
the recipe's GPU smoke (``verify.gpu``) run there with ``CUDA_DISABLE_PTX_JIT=1``: the driver may not
JIT PTX, so only the SASS the wheel ships can run. Each wheel gets a report, ``<wheel>.gpu.json``
(device, capability, driver, CUDA, counts, the result digest, date), and the results of the builds
of one package version (sharded, unsharded, built in an image) must agree bit for bit.

Without a GPU nothing runs (one line, exit 0); ``dry_run`` does every step but the launches, with
the GPUs hidden (the default test tier runs it on the example's wheel).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import shutil
import site
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import quote

from cuw.base.errors import InputError, ToolError
from cuw.base.files import place_text, sha256_of
from cuw.base.reading import read_text
from cuw.base.settings import process_environ

REPORT_SUFFIX = ".gpu.json"
LOG_SUFFIX = ".gpu.log"
FORMAT = 1
SMOKE_TIMEOUT_S = 240.0  # one wheel's smoke, its torch import included
INSTALL_TIMEOUT_S = 120.0
_HARNESS = Path(__file__).with_name("gpu_harness.py")

Say = Callable[[str], None]


@dataclass(frozen=True)
class Device:
    """The machine's first GPU (``cuda:0``), as its driver reports it."""

    name: str
    capability: str  # "9.0"
    driver: Optional[str]  # "580.82.07" (NVML), None where NVML is absent
    cuda: str  # the driver's CUDA version, "13.0"

    @property
    def sm(self) -> str:
        return "sm_" + self.capability.replace(".", "")

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "capability": self.capability, "sm": self.sm, "driver": self.driver, "cuda": self.cuda}


def find_device() -> tuple[Optional[Device], str]:
    """The first GPU, through the driver library itself (no torch, no toolkit): the device, or
    None and why there is none."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None, "no NVIDIA driver here (libcuda.so.1 cannot be loaded)"
    rc = cuda.cuInit(0)
    if rc != 0:
        return None, f"the NVIDIA driver sees no usable GPU (cuInit: CUDA error {rc})"
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return None, "the NVIDIA driver lists no GPU (CUDA_VISIBLE_DEVICES may hide them)"
    handle, name = ctypes.c_int(0), ctypes.create_string_buffer(256)
    major, minor, version = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
    cuda.cuDeviceGet(ctypes.byref(handle), 0)
    cuda.cuDeviceGetName(name, 256, handle)
    cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, handle)  # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
    cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, handle)  # ..._MINOR
    cuda.cuDriverGetVersion(ctypes.byref(version))
    line = f"{version.value // 1000}.{version.value % 1000 // 10}"
    return Device(name.value.decode(errors="replace"), f"{major.value}.{minor.value}", _driver_version(), line), ""


def _driver_version() -> Optional[str]:
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() != 0:
            return None
        buffer = ctypes.create_string_buffer(96)
        ok = nvml.nvmlSystemGetDriverVersion(buffer, 96) == 0
        nvml.nvmlShutdown()
        return buffer.value.decode() if ok else None
    except (OSError, AttributeError):
        return None


# -- the wheels given ---------------------------------------------------------


@dataclass(frozen=True)
class Subject:
    """One wheel to run: where it is, and the label its report and the comparison name it by
    (``sharded/<wheel>``: builds of one version carry one file name, their folders tell them apart)."""

    path: Path
    label: str


def _canonical(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def _wheel_project(name: str) -> tuple[str, str]:
    """A wheel file name's canonical project name and version (without the packaging library: the
    GPU machine's forge may run from source with the standard library and PyYAML alone)."""
    parts = name[: -len(".whl")].split("-")
    if len(parts) < 5:
        raise InputError(f"{name}: not a wheel file name (name-version-[build-]python-abi-platform.whl)")
    return _canonical(parts[0]), parts[1]


def collect(given: list[str], package: Optional[str], download: Path) -> list[Subject]:
    """The wheels ``given`` names (files; folders, searched for ``*.whl``; index folders or URLs,
    their listed wheels), those of ``package`` only when it is set; an index URL's wheels are
    downloaded into ``download`` and checked against the sha256 its marker lists."""
    subjects: list[Subject] = []
    for item in given:
        if item.startswith(("http://", "https://")):
            subjects += _from_url(item.rstrip("/"), download)
            continue
        path = Path(item)
        if path.is_file():
            if not path.name.endswith(".whl"):
                raise InputError(f"gpu: {path} is not a wheel (.whl); give wheels, folders of wheels or an index")
            subjects.append(Subject(path, path.name))
        elif (path / "cuw-index.json").is_file():
            subjects += _from_index_folder(path, download)
        elif path.is_dir():
            subjects += [
                Subject(w, f"{path.resolve().name}/{w.relative_to(path).as_posix()}") for w in sorted(path.rglob("*.whl"))
            ]
        else:
            raise InputError(f"gpu: {path}: no such wheel, folder or index")
    if package is not None:
        subjects = [s for s in subjects if _wheel_project(s.path.name)[0] == _canonical(package)]
    if not subjects:
        raise InputError(f"gpu: no wheels{f' of {package}' if package else ''} in {', '.join(given)}")
    labels: dict[str, int] = {}
    unique = []
    for s in subjects:
        labels[s.label] = labels.get(s.label, 0) + 1
        unique.append(s if labels[s.label] == 1 else Subject(s.path, f"{s.label}#{labels[s.label]}"))
    return unique


def _marker_files(data: Any, where: str) -> tuple[dict[str, str], dict[str, Any]]:
    files = data.get("files") if isinstance(data, dict) else None
    remote = data.get("remote", {}) if isinstance(data, dict) else None
    if not isinstance(files, dict) or not isinstance(remote, dict):
        raise InputError(f"gpu: {where} is not an index marker (files: wheel -> sha256)")
    return files, remote


def _from_index_folder(folder: Path, download: Path) -> list[Subject]:
    marker = folder / "cuw-index.json"
    try:
        files, remote = _marker_files(json.loads(read_text(marker, "index marker", "index")), str(marker))
    except ValueError:
        raise InputError(f"gpu: {marker}: unreadable index marker") from None
    out = []
    for name in sorted(files):
        url = remote.get(name, {}).get("url") if isinstance(remote.get(name), dict) else None
        path = _download(url, name, files[name], download) if url else folder / "files" / name
        out.append(Subject(path, f"{folder.resolve().name}/{name}"))
    return out


def _from_url(base: str, download: Path) -> list[Subject]:
    from cuw.base import http

    files, remote = _marker_files(http.fetch_json(f"{base}/cuw-index.json", "gpu"), f"{base}/cuw-index.json")
    out = []
    for name in sorted(files):
        entry = remote.get(name)
        url = entry.get("url") if isinstance(entry, dict) else None
        out.append(Subject(_download(url or f"{base}/files/{quote(name)}", name, files[name], download), name))
    return out


def _download(url: str, name: str, sha256: str, download: Path) -> Path:
    from cuw.base import http

    data = http.fetch(url, "gpu", limit=4 << 30)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise InputError(f"gpu: {url} is not the published {name} (its sha256 differs from the index's); restore the index")
    target = download / hashlib.sha256(url.encode()).hexdigest()[:16] / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return target


# -- one wheel's environment and smoke ----------------------------------------


def _site_dirs() -> list[str]:
    """The site-packages of the Python running the forge (a venv's own, or the system's, and the
    user's): the GPU environment sees them after its own, so the machine's torch is the one used."""
    dirs = list(site.getsitepackages())
    user = site.getusersitepackages()
    if isinstance(user, str):
        dirs.append(user)
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]


def make_env(folder: Path) -> Path:
    """A venv at ``folder`` without pip (a GPU machine may lack ensurepip; its own pip is seen
    through the machine's site-packages) with the system's site-packages and this Python's; returns
    its Python."""
    run = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(folder)],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT_S,
    )
    if run.returncode != 0:
        raise ToolError(f"gpu: cannot make an environment with {sys.executable} -m venv: {' '.join(run.stderr.split())[-300:]}")
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_child_env(dry_run=False),
    ).stdout.strip()
    if not purelib:
        raise ToolError(f"gpu: the environment's Python {python} does not start")
    Path(purelib, "_cuw_machine_site.pth").write_text("".join(f"{d}\n" for d in _site_dirs()))
    return python


def _child_env(dry_run: bool) -> dict[str, str]:
    drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV")
    env = {k: v for k, v in process_environ().items() if k not in drop}
    env["CUDA_DISABLE_PTX_JIT"] = "1"  # only the SASS the wheel ships may run
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if dry_run:
        env["CUDA_VISIBLE_DEVICES"] = ""  # a dry run launches nothing, whatever the machine has
    return env


def install(python: Path, wheel: Path, log: list[str]) -> None:
    """The wheel alone into the environment: no dependencies, no index (nothing is fetched or built)."""
    cmd = [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "--no-compile", "-q", str(wheel)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=_child_env(dry_run=False))
    log.append(f"$ {' '.join(cmd)}\n{run.stdout}{run.stderr}")
    if run.returncode != 0:
        why = " ".join((run.stderr or run.stdout).split())[-300:]
        raise ToolError(f"gpu: pip could not install {wheel.name} into its environment ({why}); the machine needs pip")


@dataclass
class Outcome:
    """One wheel's run: its report (written as ``<wheel>.gpu.json``) and the child's log."""

    subject: Subject
    report: dict[str, Any]
    log: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.report["result"] in ("pass", "no smoke")


def _run_harness(
    python: Path, spec: Path, outcome_path: Path, outcome: Outcome, dry_run: bool, work: Path, timeout_s: float
) -> dict[str, Any]:
    """The harness run in the wheel's environment on ``spec``: the smoke's outcome, or why it has none."""
    harness = work / "cuw_gpu_harness.py"
    shutil.copyfile(_HARNESS, harness)
    cmd = [str(python), str(harness), str(spec)]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=_child_env(dry_run), cwd=work)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"the smoke ran over {timeout_s:g} s and was stopped"}
    outcome.log.append(f"$ {' '.join(cmd)}\n{run.stdout}{run.stderr}")
    if outcome_path.is_file():
        found: dict[str, Any] = json.loads(outcome_path.read_text())
        return found
    tail = " ".join(run.stderr.split())[-300:]
    return {"ok": False, "error": f"the smoke's process ended with exit {run.returncode} and no outcome: {tail}"}


def run_smoke(
    subject: Subject,
    recipe_key: str,
    smoke: Optional[str],
    where: str,
    device: Optional[Device],
    dry_run: bool,
    work: Path,
    timeout_s: float = SMOKE_TIMEOUT_S,
) -> Outcome:
    """``subject`` installed into an environment of its own under ``work``, its smoke run there."""
    started = time.monotonic()
    report: dict[str, Any] = {
        "format": FORMAT,
        "wheel": subject.path.name,
        "sha256": sha256_of(subject.path),
        "label": subject.label,
        "recipe": recipe_key,
        "device": device.as_json() if device and not dry_run else None,
        "dry_run": dry_run,
        "ptx_jit": "disabled (CUDA_DISABLE_PTX_JIT=1)",
        "smoke": None,
        "tests": None,
        "result_digest": None,
        "result": "fail",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    outcome = Outcome(subject, report)
    if smoke is None:
        report["result"] = "no smoke"
        report["smoke"] = {"ok": None, "error": f"recipe {recipe_key} declares no verify.gpu"}
        return outcome
    python = make_env(work / "env")
    install(python, subject.path, outcome.log)
    spec = work / "spec.json"
    outcome_path = work / "outcome.json"
    spec.write_text(
        json.dumps(
            {
                "smoke": smoke,
                "where": where,
                "dry_run": dry_run,
                "wheel": subject.path.name,
                "label": subject.label,
                "outcome": str(outcome_path),
            }
        )
    )
    smoke_out = _run_harness(python, spec, outcome_path, outcome, dry_run, work, timeout_s)
    report["smoke"] = smoke_out
    report["python"] = smoke_out.get("python")
    report["torch"] = smoke_out.get("torch")
    report["result_digest"] = smoke_out.get("result_digest")
    report["result"] = "pass" if smoke_out.get("ok") else "fail"
    report["seconds"] = round(time.monotonic() - started, 3)
    return outcome


# -- agreement between builds -------------------------------------------------


def compare(outcomes: list[Outcome]) -> list[str]:
    """Builds of one package version (sharded, unsharded, built in an image: one file name in
    different folders, or other tags) must give the same result digest; each disagreement is a
    finding. Each report records with how many builds it was compared and whether all agreed."""
    groups: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        if o.report.get("result_digest"):
            groups.setdefault(_wheel_project(o.subject.path.name), []).append(o)
    findings = []
    for (project, version), members in sorted(groups.items()):
        digests = {o.report["result_digest"] for o in members}
        for o in members:
            o.report["compared"] = {"builds": len(members), "agree": len(digests) == 1}
        if len(digests) > 1:
            each = "; ".join(f"{o.subject.label}: {o.report['result_digest']}" for o in members)
            findings.append(f"{project} {version}: the builds' results differ bit for bit ({each})")
    return findings


def report_path(subject: Subject, out: Optional[Path]) -> Path:
    """``<out>/<label>.gpu.json``, or beside the wheel without ``out``."""
    if out is None:
        return subject.path.with_name(subject.path.name + REPORT_SUFFIX)
    return out / (subject.label.replace("#", "-") + REPORT_SUFFIX)


def write_report(outcome: Outcome, out: Optional[Path]) -> Path:
    path = report_path(outcome.subject, out)
    path.parent.mkdir(parents=True, exist_ok=True)
    place_text(path, json.dumps(outcome.report, indent=2, sort_keys=True) + "\n", "gpu report")
    if outcome.log:
        place_text(path.with_name(path.name[: -len(REPORT_SUFFIX)] + LOG_SUFFIX), "\n".join(outcome.log), "gpu log")
    return path


def summary_line(outcome: Outcome) -> str:
    r = outcome.report
    smoke = r.get("smoke") or {}
    if r["result"] == "no smoke":
        return f"gpu: {outcome.subject.label}: no smoke ({smoke.get('error')})"
    where = "dry run, nothing launched" if r["dry_run"] else f"{r['device']['name']}, {r['device']['sm']}"
    said = f"{smoke.get('checks', 0)} check(s)"
    if smoke.get("skipped"):
        said += f", left out: {'; '.join(smoke['skipped'])}"
    if r.get("result_digest"):
        said += f", result {r['result_digest'][:23]}"
    if r["result"] != "pass":
        said += f": {smoke.get('error')}"
    return f"gpu: {r['result'].upper()} {outcome.subject.label} ({where}): {said}"


def run_tier(
    subjects: list[Subject],
    recipe_of: Callable[[Subject], tuple[str, Optional[str], str]],
    device: Optional[Device],
    dry_run: bool,
    out: Optional[Path],
    say: Say,
    timeout_s: float = SMOKE_TIMEOUT_S,
) -> tuple[list[Outcome], list[str], list[Path]]:
    """Every subject's smoke, one environment each, then the comparison; the reports written.
    ``recipe_of`` gives a subject's recipe key, smoke and where the smoke is written (for its errors)."""
    outcomes = []
    for subject in subjects:
        key, smoke, where = recipe_of(subject)
        with tempfile.TemporaryDirectory(prefix="cuw-gpu-") as tmp:
            outcome = run_smoke(subject, key, smoke, where, device, dry_run, Path(tmp), timeout_s)
        say(summary_line(outcome))
        outcomes.append(outcome)
    findings = compare(outcomes)
    paths = [write_report(o, out) for o in outcomes]
    return outcomes, findings, paths
