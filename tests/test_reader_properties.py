"""Every reader of a file the forge did not just write, fed random bytes and random JSON: each
either reads it or refuses it with a CuwError (one line, exit 2); never another exception.

The readers: a cost table, a shard archive's manifest (inside a real tar), an index's marker,
the published build records (the plan's and the audit's reader), a seat log. The YAML reader has
its own property test (tests/test_properties.py).
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cuw.base.errors import CuwError

_SCALE = int(os.environ.get("CUW_PROPERTY_EXAMPLES", "0")) or None
CHECK = settings(max_examples=_SCALE or 80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)
# Shapes close to the real ones, so the reader goes past its first check.
MARKERS = st.fixed_dictionaries(
    {"format": JSON, "files": st.dictionaries(st.text(max_size=30), JSON, max_size=4)}, optional={"remote": JSON}
)
COSTS = st.fixed_dictionaries(
    {"header": JSON, "costs": st.dictionaries(st.text(max_size=20), JSON, max_size=5)}, optional={"link": JSON, "shard": JSON}
)
MANIFESTS = st.dictionaries(
    st.sampled_from(
        ["format", "cell", "tool", "tool_version", "shard", "shard_index", "shard_count", "fingerprint", "builder", "entries"]
    )
    | st.text(max_size=8),
    JSON,
    max_size=10,
)
CONTENT = st.binary(max_size=300) | JSON.map(lambda v: json.dumps(v, allow_nan=True).encode())


def _only_cuw_errors(read, *args) -> None:
    try:
        read(*args)
    except CuwError:
        pass  # a refusal: cli/main prints it as one line and exits 2
    # Any other exception escapes and fails the property.


def _file(data: bytes, name: str = "f.json") -> Path:
    folder = Path(tempfile.mkdtemp(prefix="cuw-prop-"))
    path = folder / name
    path.write_bytes(data)
    return path


@CHECK
@given(st.one_of(CONTENT, COSTS.map(lambda v: json.dumps(v, allow_nan=True).encode())))
def test_a_cost_table_is_read_or_refused(data):
    from cuw.partition.costs import load

    _only_cuw_errors(load, _file(data, "costs.json"))


@CHECK
@given(st.one_of(CONTENT, MANIFESTS.map(lambda v: json.dumps(v, allow_nan=True).encode())))
def test_a_shard_archives_manifest_is_read_or_refused(data):
    from cuw.jobs.archive import check_archive, read_manifest

    path = _file(b"", "cuw-shard-example-linux-py3.11-cu13.0-notorch-1of2.tar")
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    _only_cuw_errors(read_manifest, path)
    _only_cuw_errors(check_archive, path)


@CHECK
@given(st.one_of(CONTENT, MARKERS.map(lambda v: json.dumps(v, allow_nan=True).encode())), CONTENT)
def test_an_index_and_its_build_records_are_read_or_refused(marker, record):
    from cuw.ci.published import read_records
    from cuw.wheel.index import published_files

    index = _file(marker, "cuw-index.json").parent
    (index / "files").mkdir()
    try:
        names = list(json.loads(marker).get("files", {}))
    except (ValueError, AttributeError, UnicodeDecodeError, TypeError):
        names = []
    for name in names[:3]:
        if name and "/" not in name and "\\" not in name and name not in (".", ".."):
            try:
                (index / "files" / name).write_bytes(b"PK")
                (index / "files" / f"{name}.build.json").write_bytes(record)
            except (OSError, ValueError):
                pass  # a name the file system refuses (a NUL, a slash): the reader then finds it missing
    _only_cuw_errors(published_files, index)
    _only_cuw_errors(read_records, str(index))


@CHECK
@given(st.lists(st.one_of(st.binary(max_size=80), JSON.map(lambda v: json.dumps(v, allow_nan=True).encode())), max_size=6))
def test_a_seat_log_is_read_or_refused_line_by_line(lines):
    from cuw.seat.seat_log import LogReader, read_log

    path = _file(b"\n".join(lines), "seat.jsonl")
    _only_cuw_errors(read_log, path)
    _only_cuw_errors(lambda p: LogReader(p, count_host=True).compiled_count(), path)
