"""Wheel variants (PEP 825, opt-in with ``wheel.variants: true``): what a CUDA wheel needs of a GPU,
said in the wheel and on the index so that an installer that reads variants picks the wheel the
machine can run.

A variant wheel's properties come from what the forge knows of it, nothing guessed:

* ``nvidia :: cuda_version_lower_bound :: 13.0``: the cell's CUDA line (the driver must run it);
* ``nvidia :: sm_arch :: 90_real`` for each SASS arch and ``120_virtual`` for each PTX the verify
  gate lists in the wheel (cuobjdump's ``--list-elf`` and ``--list-ptx``, the same reading).

A wheel fits a machine when, per feature, one of its values fits (PEP 825), so one wheel carrying
SASS for sm_75 .. sm_120 fits each of those GPUs. The namespace, features and value grammar are the
NVIDIA provider's (``nvidia-variant-provider``; uv carries its own implementation of it).

The properties go into ``*.dist-info/variant.json`` (RECORD updated), the variant label into the
file name (``...-manylinux_2_31_x86_64-cu130_1a2b3c4d.whl``: the CUDA line and the properties'
hash, so a label always names one set of properties), and the index serves the merge of its
wheels' ``variant.json`` as ``{name}-{version}-variants.json`` beside them, linked on every page
that links them. The format is the one variantlib 0.2.2 and uv 0.13 read (schema v0.2.0).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Optional

from packaging.tags import Tag
from packaging.utils import BuildTag, NormalizedName, parse_wheel_filename
from packaging.version import Version

from cuw.base.errors import InputError

SCHEMA = "https://variants-schema.wheelnext.dev/v0.2.0.json"
NAMESPACE = "nvidia"
PROVIDER: dict[str, Any] = {
    "requires": ["nvidia-variant-provider>=0.0.1,<1.0.0"],
    "plugin-api": "nvidia_variant_provider.plugin:NvidiaVariantPlugin",
}
LOWER_BOUND = "cuda_version_lower_bound"
SM_ARCH = "sm_arch"
DIST_INFO_FILE = "variant.json"
INDEX_SUFFIX = "-variants.json"
LABEL = re.compile(r"[0-9a-z_.]{1,16}")
_NAME = re.compile(r"[a-z0-9_]+")
_VALUE = re.compile(r"[a-z0-9_.]+")

Properties = dict[str, list[str]]
"""The ``nvidia`` namespace's features and their values."""


def split_label(filename: str) -> tuple[str, Optional[str]]:
    """``(the file name without its variant label, the label)``; a wheel without one: ``(filename, None)``.

    A wheel name has 5 parts, 6 with a build tag or a label, 7 with both; a build tag starts with a
    digit and a Python tag never does, which tells the two apart."""
    if not filename.endswith(".whl"):
        return filename, None
    parts = filename[: -len(".whl")].split("-")
    if len(parts) == 7 or (len(parts) == 6 and not parts[2][:1].isdigit()):
        return "-".join(parts[:-1]) + ".whl", parts[-1]
    return filename, None


def parse_wheel_name(filename: str) -> tuple[NormalizedName, Version, BuildTag, frozenset[Tag]]:
    """``packaging.utils.parse_wheel_filename`` for a wheel that may carry a variant label (checked)."""
    base, label = split_label(filename)
    if label is not None and not LABEL.fullmatch(label):
        raise InputError(f"{filename}: variant label {label!r} is not 1-16 of a-z 0-9 _ . (PEP 825)")
    return parse_wheel_filename(base)


def properties(cuda: str, sass: set[str], ptx: set[str]) -> Properties:
    """The properties of a wheel of CUDA line ``cuda`` whose device code is SASS for ``sass`` and
    PTX for ``ptx`` (arch numbers as cuobjdump lists them: ``"90"``, ``"120"``)."""
    if not re.fullmatch(r"[0-9]+\.[0-9]+", cuda):
        raise InputError(f"CUDA line {cuda!r} is no MAJOR.MINOR version; a variant's lower bound is one")
    archs = [f"{n}_real" for n in sorted(sass, key=int)] + [f"{n}_virtual" for n in sorted(ptx, key=int)]
    return {LOWER_BOUND: [cuda], **({SM_ARCH: archs} if archs else {})}


def variant_hash(props: Properties) -> str:
    """variantlib's hash of a variant (8 hex digits): sha256 over its sorted ``ns :: feature :: value`` lines."""
    lines = sorted((NAMESPACE, feature, value) for feature, values in props.items() for value in values)
    digest = hashlib.sha256("".join(f"{n} :: {f} :: {v}\n" for n, f, v in lines).encode())
    return digest.hexdigest()[:8]


def label_of(cuda: str, props: Properties) -> str:
    """``cu130_1a2b3c4d``: readable, and one label per set of properties within a version."""
    return f"cu{cuda.replace('.', '')}_{variant_hash(props)}"


def document(variants: dict[str, Properties]) -> dict[str, Any]:
    """A ``variant.json`` (one variant) or ``-variants.json`` (all of a version's) as data."""
    return {
        "$schema": SCHEMA,
        "default-priorities": {"namespace": [NAMESPACE]},
        "providers": {NAMESPACE: PROVIDER},
        "variants": {label: {NAMESPACE: props} for label, props in sorted(variants.items())},
    }


def text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=4, sort_keys=True) + "\n"


def read_variant(wheel: Path) -> Optional[tuple[str, Properties]]:
    """The label and properties a variant wheel carries, checked against its file name and PEP 825's
    grammar; None for a wheel without a label and without ``variant.json``."""
    label = split_label(wheel.name)[1]
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/" + DIST_INFO_FILE)]
        raw = zf.read(names[0]) if len(names) == 1 else None
    if label is None and not names:
        return None
    if label is None:
        raise InputError(f"{wheel.name}: carries {names[0]} but no variant label in its file name")
    if raw is None:
        raise InputError(f"{wheel.name}: a variant label ({label}) but {len(names)} *.dist-info/{DIST_INFO_FILE}, not 1")
    return label, _properties_of(raw, label, wheel.name)


def _properties_of(raw: bytes, label: str, where: str) -> Properties:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise InputError(f"{where}: {DIST_INFO_FILE} is not JSON ({exc})") from None
    variants = data.get("variants") if isinstance(data, dict) else None
    if data.get("$schema") != SCHEMA or not isinstance(variants, dict) or list(variants) != [label]:
        raise InputError(f"{where}: {DIST_INFO_FILE} must be schema {SCHEMA} describing exactly the variant {label}")
    found = variants[label]
    props = found.get(NAMESPACE) if isinstance(found, dict) and list(found) == [NAMESPACE] else None
    if not isinstance(props, dict) or not all(
        _NAME.fullmatch(str(f)) and isinstance(v, list) and v and all(isinstance(x, str) and _VALUE.fullmatch(x) for x in v)
        for f, v in props.items()
    ):
        raise InputError(f"{where}: {DIST_INFO_FILE}'s variant {label} is not {{{NAMESPACE}: {{feature: [value, ...]}}}}")
    return {str(f): list(v) for f, v in props.items()}


def _record_line(path: str, data: bytes) -> bytes:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}\n".encode()


def apply(wheel: Path, props: Properties, label: str, out_dir: Path) -> Path:
    """Writes the variant of ``wheel`` into ``out_dir``: every member as it was, ``variant.json``
    added before RECORD and listed in it, the label appended to the file name. Returns its path."""
    if split_label(wheel.name)[1] is not None:
        raise InputError(f"{wheel.name} already carries a variant label")
    if not LABEL.fullmatch(label):
        raise InputError(f"variant label {label!r} is not 1-16 of a-z 0-9 _ . (PEP 825)")
    out_dir.mkdir(parents=True, exist_ok=True)
    dest = out_dir / f"{wheel.name[: -len('.whl')]}-{label}.whl"
    data = text(document({label: props})).encode()
    with zipfile.ZipFile(wheel) as src, tempfile.NamedTemporaryFile(dir=out_dir, suffix=".part", delete=False) as tmp:
        records = [i for i in src.infolist() if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/RECORD")]
        if len(records) != 1:
            raise InputError(f"{wheel.name}: {len(records)} *.dist-info/RECORD, not 1")
        record = records[0]
        path = record.filename.rsplit("/", 1)[0] + "/" + DIST_INFO_FILE
        with zipfile.ZipFile(tmp, "w") as dst:
            for info in src.infolist():
                if info.filename == path:
                    continue
                if info is record:
                    added = zipfile.ZipInfo(path, date_time=info.date_time)
                    added.external_attr, added.compress_type = 0o644 << 16, zipfile.ZIP_DEFLATED
                    dst.writestr(added, data)
                    lines = [
                        line for line in src.read(info).splitlines(keepends=True) if not line.startswith(f"{path},".encode())
                    ]
                    dst.writestr(info, b"".join(lines) + _record_line(path, data))
                else:
                    with src.open(info) as fin, dst.open(info, "w") as fout:
                        shutil.copyfileobj(fin, fout)
    Path(tmp.name).replace(dest)
    return dest


def make_variant(wheel: Path, cuda: str, sass: set[str], ptx: set[str], out_dir: Path) -> Path:
    """The finished wheel as a variant of its CUDA line and listed device code (:func:`apply`)."""
    props = properties(cuda, sass, ptx)
    return apply(wheel, props, label_of(cuda, props), out_dir)


def index_name(filename: str) -> str:
    """``{name}-{version}-variants.json`` for a wheel's file name, both as the wheel's name spells them."""
    name, version = split_label(filename)[0].split("-")[:2]
    return f"{name}-{version}{INDEX_SUFFIX}"


def merge(found: dict[str, str], where: str) -> dict[str, Properties]:
    """The variants of one version (``found``: wheel file name -> its ``variant.json`` variant as the
    index's marker keeps it, ``{"label": {...}}``); a label with two sets of properties is refused."""
    merged: dict[str, Properties] = {}
    owner: dict[str, str] = {}
    for wheel, kept in sorted(found.items()):
        try:
            one = json.loads(kept)
        except ValueError:
            raise InputError(f"{where}: the variant kept for {wheel} is not JSON; restore the published index") from None
        if not isinstance(one, dict) or len(one) != 1:
            raise InputError(f"{where}: the variant kept for {wheel} is not one label's; restore the published index")
        ((label, props),) = one.items()
        if label in merged and merged[label] != props:
            raise InputError(
                f"{wheel}: variant label {label} names other properties than in {owner[label]} (PEP 825: one label, "
                "one set of properties within a version); build it again"
            )
        merged[label], owner[label] = props, wheel
    return merged


def kept_variant(wheel: Path) -> Optional[str]:
    """What the index's marker keeps of a variant wheel (``{"label": properties}``, compact), None
    for another wheel."""
    found = read_variant(wheel)
    if found is None:
        return None
    label, props = found
    return json.dumps({label: props}, sort_keys=True, separators=(",", ":"))
