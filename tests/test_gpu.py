"""The GPU tier (``cuw gpu``, cuw/wheel/gpu.py; docs/gpu.md): each wheel in an environment of its
own that sees the machine's torch, only shipped SASS allowed (``CUDA_DISABLE_PTX_JIT=1``), the
recipe's smoke, reports, builds compared bit for bit, reports beside published wheels; and the
prepared command for a machine with a GPU (benchmarks/gpu_check.py), dry run.

No GPU here: the runs are dry runs (every step but the launches, GPUs hidden), which the smokes see
as ``gpu.dry_run``; the tiny wheel's smokes exercise the rest (checks, results, comparison)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from wheel.wheelfile import WheelFile

from cuw.base.errors import InputError
from cuw.ci.audit import gpu_report_findings
from cuw.cli.main import main
from cuw.config.recipe import load_recipe
from cuw.wheel import gpu
from cuw.wheel.index import CHOOSER, MARKER, PACKAGES, add_gpu_reports, build_index, published_files, read_gpu_reports

REPO = Path(__file__).resolve().parent.parent

no_gpu = pytest.mark.skipif(gpu.find_device()[0] is not None, reason="this machine has a GPU: the tier really runs here")


def _recipes(tmp: Path, smoke: str) -> Path:
    """A recipes folder with one recipe, ``tiny``, whose GPU smoke is ``smoke``."""
    folder = tmp / "recipes" / "tiny"
    (folder / "package").mkdir(parents=True)
    block = "\n".join("    " + line for line in smoke.strip().splitlines())
    (folder / "recipe.yml").write_text(
        f"name: tiny-pkg\nlinks_torch: false\nsource:\n  path: package\nbackend: setuptools\nverify:\n  gpu: |\n{block}\n"
    )
    return tmp / "recipes"


def _tiny_wheel(folder: Path) -> Path:
    """A real, installable wheel of ``tiny_pkg``."""
    tree = folder / "tree"
    (tree / "tiny_pkg").mkdir(parents=True)
    (tree / "tiny_pkg" / "__init__.py").write_text("ANSWER = 42\n")
    info = tree / "tiny_pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-pkg\nVersion: 1.0\n")
    (info / "WHEEL").write_text("Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
    out = folder / "tiny_pkg-1.0-py3-none-any.whl"
    with WheelFile(out, "w") as wf:
        wf.write_files(str(tree))
    shutil.rmtree(tree)
    return out


def _report(path: Path) -> dict:
    return json.loads(path.read_text())


@no_gpu
def test_without_a_gpu_one_line_and_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipes = _recipes(tmp_path, "gpu.check(False, 'must not run')")
    wheel = _tiny_wheel(tmp_path)
    assert main(["gpu", str(wheel), "--recipes", str(recipes)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no NVIDIA driver" in err[0] and "nothing run" in err[0], err
    assert not list(tmp_path.rglob("*.gpu.json"))


@no_gpu
def test_smoke_runs_in_its_own_environment_with_the_machines_torch_and_no_ptx_jit(tmp_path: Path) -> None:
    smoke = """
import os, sys
import tiny_pkg
import torch
gpu.check(os.environ.get("CUDA_DISABLE_PTX_JIT") == "1", "the driver may JIT PTX")
gpu.check(os.environ.get("CUDA_VISIBLE_DEVICES") == "", "a dry run sees the GPUs")
gpu.check(sys.prefix != sys.base_prefix, "not in an environment of its own")
gpu.check(tiny_pkg.__file__.startswith(sys.prefix), f"{tiny_pkg.__file__} is not the wheel installed in {sys.prefix}")
gpu.check(tiny_pkg.ANSWER == 42, "the wheel's module")
gpu.note("torch_file", torch.__file__)
gpu.skip("the launches")
"""
    recipes = _recipes(tmp_path, smoke)
    wheel = _tiny_wheel(tmp_path)
    out = tmp_path / "out"
    assert main(["gpu", str(wheel), "--recipes", str(recipes), "--dry-run", "--out", str(out)]) == 0
    report = _report(out / (wheel.name + gpu.REPORT_SUFFIX))
    assert report["result"] == "pass" and report["dry_run"] is True and report["device"] is None, report
    assert report["smoke"]["checks"] == 5 and report["smoke"]["skipped"] == ["the launches"]
    import torch

    assert report["smoke"]["notes"]["torch_file"] == torch.__file__  # the machine's torch, not a copy
    assert report["torch"]["version"] == torch.__version__
    assert report["sha256"] and report["wheel"] == wheel.name and report["recipe"] == "tiny"
    assert (out / (wheel.name + gpu.LOG_SUFFIX)).is_file()


@no_gpu
@pytest.mark.parametrize(
    ("smoke", "said"),
    [
        ("gpu.check(1 + 1 == 3, 'arithmetic is off')", "check failed: arithmetic is off"),
        ("x = 1\nraise RuntimeError('the kernel said no')", "RuntimeError: the kernel said no (line 2 of"),
        ("import os\nos._exit(3)", "exit 3 and no outcome"),
    ],
)
def test_a_failing_smoke_exits_1_naming_why(tmp_path: Path, capsys: pytest.CaptureFixture[str], smoke: str, said: str) -> None:
    recipes = _recipes(tmp_path, smoke)
    wheel = _tiny_wheel(tmp_path)
    assert main(["gpu", str(wheel), "--recipes", str(recipes), "--dry-run"]) == 1
    report = _report(wheel.with_name(wheel.name + gpu.REPORT_SUFFIX))
    assert report["result"] == "fail" and said in report["smoke"]["error"], report["smoke"]
    err = capsys.readouterr().err
    assert f"gpu: FAIL {wheel.name}" in err and said in err and "0 of 1 wheel(s) passed" in err


@no_gpu
@pytest.mark.parametrize("same", [True, False])
def test_builds_of_one_version_are_compared_bit_for_bit(tmp_path: Path, capsys: pytest.CaptureFixture[str], same: bool) -> None:
    # The builds carry one file name in folders of their own (sharded/, unsharded/): the label tells them apart.
    smoke = "gpu.result(b'the same bytes')" if same else "gpu.result(gpu.label.split('/')[1].encode())"
    recipes = _recipes(tmp_path, smoke)
    builds = tmp_path / "wheels"
    for build in ("sharded", "unsharded"):
        (builds / build).mkdir(parents=True)
        _tiny_wheel(builds / build)
    out = tmp_path / "out"
    rc = main(["gpu", str(builds), "--recipes", str(recipes), "--dry-run", "--out", str(out)])
    reports = [_report(p) for p in sorted(out.rglob("*.gpu.json"))]
    assert [r["label"].split("/")[1] for r in reports] == ["sharded", "unsharded"]
    assert all(r["compared"] == {"builds": 2, "agree": same} for r in reports), reports
    err = capsys.readouterr().err
    if same:
        assert rc == 0 and len({r["result_digest"] for r in reports}) == 1 and "2 result(s) compared" in err
    else:
        assert rc == 1 and "tiny-pkg 1.0: the builds' results differ bit for bit" in err, err
        assert "wheels/sharded/tiny_pkg-1.0-py3-none-any.whl: sha256:" in err


def test_a_smoke_with_a_syntax_error_is_the_recipes_error(tmp_path: Path) -> None:
    recipes = _recipes(tmp_path, "import torch\nif True print(1)")
    with pytest.raises(InputError, match=r"recipe.yml: verify.gpu line 2: .*fix the smoke's Python"):
        load_recipe("tiny", recipes)


def test_bad_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipes = _recipes(tmp_path, "pass")
    wheel = _tiny_wheel(tmp_path)
    assert main(["gpu", str(wheel), "--recipes", str(recipes), "--dry-run", "--into-index", str(tmp_path / "site")]) == 2
    assert "a dry run launches nothing, so its reports are never published" in capsys.readouterr().err
    assert main(["gpu", str(tmp_path / "nothing.whl"), "--dry-run"]) == 2
    assert "no such wheel, folder or index" in capsys.readouterr().err
    assert main(["gpu", str(wheel), "--recipes", str(recipes), "--dry-run", "--package", "other"]) == 2
    assert "no wheels of other" in capsys.readouterr().err


def test_the_gpu_path_imports_only_what_the_bundle_carries() -> None:
    """benchmarks/gpu_check.py carries PYLIB for a bare Python: the verb's path may import nothing else."""
    code = (
        "import sys, json; before = set(sys.modules); import cuw.cli.verbs, cuw.wheel.gpu, cuw.wheel.index, cuw.config.recipe;"
        "from importlib.metadata import packages_distributions as d; m = d();"
        "new = {n.split('.')[0] for n in set(sys.modules) - before} - {'cuw'};"
        "print(json.dumps(sorted({x for n in new for x in m.get(n, [])})))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    spec = json.loads(run.stdout)
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    assert spec and set(spec) <= set(gpu_check.PYLIB), f"the gpu path imports {spec}; the bundle carries {gpu_check.PYLIB}"


# -- with the example's wheel (the test tier's build) ------------------------


@no_gpu
def test_dry_run_of_the_examples_smoke(example_cell, tmp_path: Path) -> None:
    out = tmp_path / "out"
    rc = main(["gpu", str(example_cell.wheel), "--recipes", str(example_cell.recipes), "--dry-run", "--out", str(out)])
    report = _report(out / (example_cell.wheel.name + gpu.REPORT_SUFFIX))
    assert rc == 0 and report["result"] == "pass", report
    # Every step but the launch: the library loaded, each TU's host code answered, the emulation ran.
    assert report["smoke"]["checks"] == 1 and report["smoke"]["skipped"] == ["launch_all on 1000003 floats (1004 emulated)"]
    assert report["result_digest"] is None and report["recipe"] == "example"
    assert report["ptx_jit"].startswith("disabled")


def _real_run_report(wheel: Path, folder: Path) -> Path:
    """A report as a run on a GPU writes it (the format the dry run writes, with a device)."""
    from cuw.base.files import sha256_of

    report = {
        "format": gpu.FORMAT,
        "wheel": wheel.name,
        "sha256": sha256_of(wheel),
        "label": f"sharded/{wheel.name}",
        "recipe": "example",
        "device": {"name": "NVIDIA H200", "capability": "9.0", "sm": "sm_90", "driver": "580.82.07", "cuda": "13.0"},
        "dry_run": False,
        "result": "pass",
        "result_digest": "sha256:" + "d9" * 32,
        "date": "2026-12-04T12:00:00Z",
    }
    path = folder / (wheel.name + gpu.REPORT_SUFFIX)
    path.write_text(json.dumps(report, indent=2))
    return path


def test_a_gpu_report_goes_beside_its_published_wheel(example_cell, tmp_path: Path) -> None:
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    wheel = Path(shutil.copy2(example_cell.wheel, incoming))
    site = tmp_path / "site"
    build_index(incoming, site)
    published = dict(published_files(site))
    report = _real_run_report(wheel, tmp_path)

    (name,) = add_gpu_reports(site, [report])
    assert (site / "files" / name).read_bytes() == report.read_bytes()
    assert read_gpu_reports(site) == {wheel.name: {name: _sha(report)}}
    assert published_files(site) == published  # the wheel and its listing untouched
    entry = next(w for w in json.loads((site / PACKAGES).read_text())["wheels"] if w["filename"] == wheel.name)
    assert entry["ran_on"] == [
        {
            "device": "NVIDIA H200",
            "sm": "sm_90",
            "date": "2026-12-04T12:00:00Z",
            "url": f"files/{name.replace('+', '%2B')}",
            "sha256": _sha(report),
        }
    ]
    assert '"; ran on: " + w.ran_on.map((r) => r.device + ", " + r.sm)' in (site / CHOOSER).read_text()
    assert add_gpu_reports(site, [report]) == []  # the same report again: already there
    build_index(incoming, site)  # another publish keeps the reports listed
    assert name in read_gpu_reports(site)[wheel.name]

    assert gpu_report_findings(str(site)) == []
    (site / "files" / name).write_text("{}")
    (finding,) = gpu_report_findings(str(site))
    assert finding.subject == wheel.name and f"gpu report {name}: other bytes" in finding.detail
    (site / "files" / name).unlink()
    assert "missing or unreadable" in gpu_report_findings(str(site))[0].detail

    dry = json.loads(report.read_text()) | {"dry_run": True, "device": None}
    report.write_text(json.dumps(dry))
    with pytest.raises(InputError, match="a dry run"):
        add_gpu_reports(site, [report])
    other = json.loads(report.read_text()) | {"dry_run": False, "device": {"name": "X", "sm": "sm_90"}, "sha256": "0" * 64}
    report.write_text(json.dumps(other))
    with pytest.raises(InputError, match="ran other bytes than the published"):
        add_gpu_reports(site, [report])
    assert json.loads((site / MARKER).read_text())["gpu_reports"] == {
        wheel.name: {name: read_gpu_reports(site)[wheel.name][name]}
    }


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


@no_gpu
def test_the_prepared_gpu_check_dry_run(example_cell, tmp_path: Path) -> None:
    """benchmarks/gpu_check.py run, as the GPU machine runs it, with the test tier's example wheel as its bundle."""
    bundle = tmp_path / "bundle"
    (bundle / "wheels" / "cell").mkdir(parents=True)
    shutil.copy2(example_cell.wheel, bundle / "wheels" / "cell")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OUT": str(out)}
    run = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_check.py"), "run", "--bundle", str(bundle), "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    summary = json.loads((out / "gpu_check.json").read_text())
    (report,) = summary["reports"]
    assert summary["exit"] == 0 and report["dry_run"] is True and report["result"] == "pass"
    assert report["label"] == f"wheels/cell/{example_cell.wheel.name}"
    log = (out / "gpu_check.log").read_text()
    assert "cuw gpu exit 0" in log and "gpu: PASS wheels/cell/" in log
    assert list((out / "reports").rglob("*.gpu.log"))
