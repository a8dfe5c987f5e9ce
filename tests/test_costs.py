"""Cost tables are merged, never replaced, and never written over their own input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cuw.partition.costs import load, record
from cuw.base.errors import CuwError


def _seat_log(path: Path, costs: dict[str, float]) -> Path:
    lines = [{"action": "compiled", "key": k, "outcome": "miss", "rc": 0, "seconds": v} for k, v in costs.items()]
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return path


def test_one_shards_log_updates_its_keys_and_keeps_the_others(tmp_path):
    table = tmp_path / "costs.json"
    record([_seat_log(tmp_path / "s1.jsonl", {"a.cu": 10.0, "b.cu": 20.0})], table)
    record([_seat_log(tmp_path / "s2.jsonl", {"c.cu": 5.0})], table)
    merged = record([_seat_log(tmp_path / "s1b.jsonl", {"a.cu": 12.5})], table)
    assert merged.costs == {"a.cu": 12.5, "b.cu": 20.0, "c.cu": 5.0}
    assert load(table).costs == merged.costs
    history = merged.header["from"]
    assert [sorted(h["keys"]) for h in history] == [["a.cu", "b.cu"], ["c.cu"], ["a.cu"]]
    assert all(len(h["logs"]) == 1 for h in history)


def test_the_output_may_not_be_one_of_the_logs(tmp_path):
    log = _seat_log(tmp_path / "seat.jsonl", {"a.cu": 1.0})
    before = log.read_bytes()
    with pytest.raises(CuwError, match="is also a --from log"):
        record([log], log)
    with pytest.raises(CuwError, match="is also a --from log"):
        record([log], tmp_path / "." / "seat.jsonl")
    assert log.read_bytes() == before


@pytest.mark.parametrize("bad", ["NaN", "Infinity", "-Infinity", "-1", "true", '"3"'])
def test_a_table_with_a_cost_that_is_not_finite_seconds_is_refused(tmp_path, bad):
    table = tmp_path / "costs.json"
    table.write_text('{"header": {}, "costs": {"a.cu": %s}}' % bad)
    with pytest.raises(CuwError, match=str(table)):
        load(table)


def test_seat_log_lines_that_are_not_entries_are_named(tmp_path):
    log = tmp_path / "seat.jsonl"
    log.write_text('{"action": "compiled", "key": "a.cu", "rc": 0, "outcome": "miss", "seconds": 1}\n[1, 2]\n')
    with pytest.raises(CuwError, match=r"seat.jsonl:2: not a seat log line"):
        record([log], tmp_path / "costs.json")
    assert not (tmp_path / "costs.json").exists()
