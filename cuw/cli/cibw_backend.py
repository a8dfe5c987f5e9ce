"""The PEP 517 backend of the cibuildwheel driver project (see :mod:`cuw.ci.cibw`).

cibuildwheel builds the driver with ``pip wheel --no-build-isolation``; this
backend runs the forge's own job (``python -m cuw`` with the arguments in
``$CUW_CIBW_COMMAND``) in the build Python, so its gate decides. The link's
finished, verified wheel is the build's wheel. A shard's product is its cache
archive (written through the host mount); cibuildwheel still expects a wheel,
so the shard hands back a receipt: an empty wheel named for the shard whose
dist-info records the archive.

``python -m cuw.cli.cibw_backend repair WHEEL DEST`` is the repair command: the
link already repaired the wheel to the policy's tag, so it is copied unchanged.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from packaging.tags import sys_tags

from cuw.base.settings import Settings
from cuw.ci.cibw import COMMAND_VAR


def _job_args() -> list[str]:
    """The job's command line: the backend is an entry point of its own, so it reads its settings here."""
    text = Settings.from_env().cibw_command
    if not text:
        sys.exit(f"cuw: ${COMMAND_VAR} is not set: this project is built by `cuw ... --backend cibuildwheel`")
    return shlex.split(text)


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None, metadata_directory: Optional[str] = None) -> str:
    from cuw.cli.parser import parser

    argv = _job_args()
    args = parser().parse_args(argv)
    started = time.time()
    rc = subprocess.run([sys.executable, "-m", "cuw", *argv], stdin=subprocess.DEVNULL, check=False).returncode
    if rc != 0:
        sys.exit(f"cuw: `cuw {argv[0]}` exited {rc}: its gate refused the job (the lines above say why)")
    out = Path(wheel_directory)
    if args.verb == "link":
        fresh = [w for w in Path(args.dist).glob("*.whl") if w.stat().st_mtime >= started - 1]
        if len(fresh) != 1:
            sys.exit(f"cuw: the link passed but {args.dist} holds {len(fresh)} new wheels, not 1")
        shutil.copy2(fresh[0], out / fresh[0].name)
        return fresh[0].name
    return shard_receipt(out, args.recipe, args.shard)


def shard_receipt(out: Path, recipe: str, shard: str) -> str:
    """An empty wheel for this interpreter and platform that names the shard."""
    from wheel.wheelfile import WheelFile

    index, count = shard.split("/")
    name = "cuw_shard_" + recipe.replace("-", "_")
    version = f"0+shard{index}of{count}"
    tag = str(next(iter(sys_tags())))
    filename = f"{name}-{version}-{tag}.whl"
    info = f"{name}-{version}.dist-info"
    with WheelFile(out / filename, "w") as wf:
        wf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wf.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: cuw\nRoot-Is-Purelib: false\nTag: {tag}\n")
        wf.writestr(f"{info}/cuw_shard.json", json.dumps({"recipe": recipe, "shard": shard}) + "\n")
    return filename


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] != "repair":
        print("usage: python -m cuw.cli.cibw_backend repair WHEEL DEST_DIR", file=sys.stderr)
        return 2
    wheel, dest = Path(argv[1]), Path(argv[2])
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(wheel, dest / wheel.name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
