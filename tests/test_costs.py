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


def test_a_link_report_without_phases_and_a_malformed_link_entry_are_refused(tmp_path):
    import json

    from cuw.base.errors import CuwError
    from cuw.partition.costs import load, record

    old = tmp_path / "link.report.json"
    old.write_text(json.dumps({"gate": "link", "ok": True, "build_s": 12.0}))
    with pytest.raises(CuwError, match="without its phases"):
        record([old], tmp_path / "costs.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"costs": {"a.cu": 1.0}, "link": {"fixed_s": "soon", "per_replay_s": 0.1}}))
    with pytest.raises(CuwError, match="link must be"):
        load(bad)


def test_a_link_report_sets_the_link_cost_and_keeps_the_tu_costs(tmp_path):
    import json

    from cuw.partition.costs import load, record

    table = tmp_path / "costs.json"
    table.write_text(json.dumps({"costs": {"a.cu": 10.0, "b.cu": 20.0}}))
    report = tmp_path / "x.whl.link.json"
    report.write_text(json.dumps({"gate": "link", "ok": True, "phases": {
        "prepare_s": 3.0, "restore_s": 1.0, "deps_s": 0.5, "build_s": 30.0, "replay_s": 6.0, "replays": 120,
        "finish_s": 4.0}}))  # fmt: skip
    got = record([report], table)
    assert got.costs == {"a.cu": 10.0, "b.cu": 20.0}
    assert (got.link.fixed_s, got.link.per_replay_s) == (3.0 + 1.0 + 0.5 + 4.0 + 24.0, 0.05)
    assert load(table).link == got.link
