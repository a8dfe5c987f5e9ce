"""Small real wheels and the build records a passed link writes beside them, for the tests of
publish, the index and the plan: no build, but every check publish makes of a wheel holds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from packaging.utils import parse_wheel_filename
from wheel.wheelfile import WheelFile

from cuw.wheel.index import RECORD_SUFFIX
from cuw.base.files import sha256_of


def make_wheel(folder: Path, filename: str, payload: bytes = b"", record: bool = True, metadata: str = "", **fields: Any) -> Path:
    """``folder/filename``: a module named after the project holding ``payload`` (which makes the
    bytes), its METADATA (``metadata``: more of its lines, ``Requires-Dist: x\n``) and WHEEL, RECORD
    by `wheel`; with ``record``, its build record saying the link hit every compile and verify
    passed, updated by ``fields``."""
    name, version, _, tags = parse_wheel_filename(filename)
    module = name.replace("-", "_")
    tree = folder / f".tree-{filename}"
    shutil.rmtree(tree, ignore_errors=True)
    (tree / module).mkdir(parents=True)
    (tree / module / "__init__.py").write_text(f"VERSION = {str(version)!r}\n")
    (tree / module / "payload.bin").write_bytes(payload)
    info = tree / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{metadata}")
    (info / "WHEEL").write_text(
        "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n" + "".join(f"Tag: {t}\n" for t in sorted(map(str, tags)))
    )
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / filename
    with WheelFile(out, "w") as wf:
        wf.write_files(str(tree))
    shutil.rmtree(tree)
    if record:
        body = {
            "format": 2,
            "wheel": filename,
            "sha256": sha256_of(out),
            "verify": {"ok": True, "checks": []},
            "link": {"misses": 0},
            **fields,
        }
        out.with_name(filename + RECORD_SUFFIX).write_text(json.dumps(body, indent=2))
    return out
