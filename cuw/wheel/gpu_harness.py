"""The child side of ``cuw gpu`` (:mod:`cuw.wheel.gpu`): runs a recipe's GPU smoke (``verify.gpu``) in
the wheel's own environment.

Standard library only: it is copied beside a spec file and run as a script by the environment's
Python, where the forge itself is not importable. It reads the spec (the smoke, whether this is a
dry run, where the outcome goes), runs the smoke with ``gpu`` in its globals and writes the outcome
as JSON; its exit status is 0 whenever the outcome was written (a failing smoke included).
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
import time
import traceback
from typing import Any


class SmokeFailed(Exception):
    """``gpu.check`` refused: the smoke's own words say why."""


class Gpu:
    """What a smoke sees as ``gpu``."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.dry_run: bool = bool(spec["dry_run"])
        """True: no GPU is used (CUDA_VISIBLE_DEVICES is empty); do every step but the launches."""
        self.device = "cuda:0"
        self.wheel: str = spec["wheel"]
        self.label: str = spec["label"]
        self.checks = 0
        self.skipped: list[str] = []
        self.notes: dict[str, Any] = {}
        self.results = 0
        self.result_bytes = 0
        self._digest = hashlib.sha256()

    def check(self, ok: object, why: str) -> None:
        """A check of the smoke: a false ``ok`` fails it with ``why``."""
        self.checks += 1
        if not ok:
            raise SmokeFailed(str(why))

    def skip(self, what: str) -> None:
        """A step a dry run leaves out (named in the report)."""
        self.skipped.append(str(what))

    def note(self, key: str, value: object) -> None:
        """A measured value for the report (numbers and strings as they are, anything else as text)."""
        self.notes[str(key)] = value if isinstance(value, (int, float, str, bool)) or value is None else str(value)

    def result(self, data: object) -> None:
        """Adds ``data`` to the result digest every build of the package must agree on bit for bit:
        bytes, or an array (a torch tensor on any device, a cupy or numpy array)."""
        raw = _as_bytes(data)
        self.results += 1
        self.result_bytes += len(raw)
        self._digest.update(raw)

    @property
    def digest(self) -> str | None:
        return f"sha256:{self._digest.hexdigest()}" if self.results else None


def _as_bytes(data: object) -> bytes:
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if hasattr(data, "detach") and hasattr(data, "cpu"):  # a torch tensor
        tensor = data.detach().cpu().contiguous()
        try:
            return bytes(tensor.numpy().tobytes())
        except (RuntimeError, ImportError):  # torch without numpy
            return bytes(tensor.view(-1).view(_torch_uint8()).tolist())
    if hasattr(data, "get") and hasattr(data, "device"):  # a cupy array
        return bytes(data.get().tobytes())
    if hasattr(data, "tobytes"):
        return bytes(data.tobytes())
    raise TypeError(f"gpu.result takes bytes or an array, not {type(data).__name__}")


def _torch_uint8() -> Any:
    import torch

    return torch.uint8


def _torch_facts(dry_run: bool) -> dict[str, Any] | None:
    """The machine's torch as the smoke saw it, when the smoke imported it."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    facts: dict[str, Any] = {"version": getattr(torch, "__version__", None), "cuda": getattr(torch.version, "cuda", None)}
    if not dry_run:
        try:
            if torch.cuda.is_available():
                facts["device"] = torch.cuda.get_device_name(0)
                facts["capability"] = "%d.%d" % torch.cuda.get_device_capability(0)
        except Exception as exc:  # noqa: BLE001 - a fact, not the smoke's outcome
            facts["device_error"] = str(exc)
    return facts


def main(spec_path: str) -> int:
    with open(spec_path, encoding="utf-8") as fh:
        spec = json.load(fh)
    gpu = Gpu(spec)
    started = time.monotonic()
    error = None
    try:
        code = compile(spec["smoke"], spec["where"], "exec")
        exec(code, {"__name__": "__cuw_gpu_smoke__", "gpu": gpu})  # noqa: S102 - the recipe's own smoke
    except SmokeFailed as exc:
        error = f"check failed: {exc}"
    except BaseException as exc:  # noqa: BLE001 - the smoke's failure is the outcome, said in one line
        traceback.print_exc()
        last = traceback.extract_tb(exc.__traceback__)[-1:] or None
        where = f" (line {last[0].lineno} of {last[0].filename})" if last else ""
        error = f"{type(exc).__name__}: {' '.join(str(exc).split())}{where}"
    outcome = {
        "ok": error is None,
        "error": error,
        "checks": gpu.checks,
        "skipped": gpu.skipped,
        "notes": gpu.notes,
        "results": gpu.results,
        "result_bytes": gpu.result_bytes,
        "result_digest": gpu.digest,
        "seconds": round(time.monotonic() - started, 3),
        "python": platform.python_version(),
        "torch": _torch_facts(gpu.dry_run),
    }
    with open(spec["outcome"], "w", encoding="utf-8") as fh:
        json.dump(outcome, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
