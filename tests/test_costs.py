"""Cost tables are merged, never replaced, and never written over their own input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cuw
from cuw.partition.costs import load, record
from cuw.base.errors import CuwError, InputError


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


def test_a_recorded_table_drives_the_cost_rule_to_golden_owners(tmp_path):
    """A key compiled twice in one build costs the sum (c.cu: 3 + 4), a cache hit costs nothing
    and stays out; LPT over the result puts each key where these literal owners say. Replacing
    the sum with the last compile (c.cu: 4) or changing the LPT order moves c.cu and a.cu."""
    from collections import Counter

    from cuw.partition.rules import assign

    log = tmp_path / "seat.jsonl"
    entries = [
        ("a.cu", "miss", 6.0),
        ("b.cu", "miss", 2.0),
        ("c.cu", "miss", 3.0),
        ("d.cu", "hit", 50.0),
        ("c.cu", "miss", 4.0),
        ("e.cu", "miss", 5.0),
    ]
    log.write_text(
        "".join(json.dumps({"action": "compiled", "key": k, "outcome": o, "rc": 0, "seconds": v}) + "\n" for k, o, v in entries)
    )
    table = record([log], tmp_path / "costs.json")
    assert table.costs == {"a.cu": 6.0, "b.cu": 2.0, "c.cu": 7.0, "e.cu": 5.0}
    result = assign(2, "cost", costs=table.costs)
    assert {k: result.owner(k) for k in table.costs} == {"a.cu": 2, "b.cu": 1, "c.cu": 1, "e.cu": 2}
    assert Counter(k for i in (1, 2) for k in result.owned(sorted(table.costs), i)) == Counter(list(table.costs))
    assert result.owner("d.cu") == 1  # not in the table: the hash (md5 a99a588e..., even: % 2 + 1 = 1)


def test_the_output_may_not_be_one_of_the_logs(tmp_path):
    log = _seat_log(tmp_path / "seat.jsonl", {"a.cu": 1.0})
    before = log.read_bytes()
    with pytest.raises(InputError, match="is also a --from log"):
        record([log], log)
    with pytest.raises(InputError, match="is also a --from log"):
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
    with pytest.raises(InputError, match=r"seat.jsonl:2: not a seat log line"):
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
    with pytest.raises(InputError, match="link must be"):
        load(bad)


def test_a_link_report_sets_the_link_cost_and_keeps_the_tu_costs(tmp_path):
    import json

    from cuw.partition.costs import load, record

    table = tmp_path / "costs.json"
    table.write_text(json.dumps({"costs": {"a.cu": 10.0, "b.cu": 20.0}}))
    report = tmp_path / "x.whl.link.json"
    report.write_text(
        json.dumps(
            {
                "gate": "link",
                "ok": True,
                "phases": {
                    "prepare_s": 3.0,
                    "restore_s": 1.0,
                    "deps_s": 0.5,
                    "build_s": 30.0,
                    "replay_s": 6.0,
                    "replays": 120,
                    "finish_s": 4.0,
                },
            }
        )
    )
    got = record([report], table)
    assert got.costs == {"a.cu": 10.0, "b.cu": 20.0}
    # prepare 3 + restore 1 + deps 0.5 + finish 4, and the build's 30 s beyond its 6 s of replays; 6 s / 120.
    assert (got.link.fixed_s, got.link.per_replay_s) == (32.5, 0.05)
    assert load(table).link == got.link


def test_shard_reports_feed_their_tus_and_the_shards_cost_beside_its_compiles(tmp_path):
    """Two compiles overlapping in two jobs are counted once: the build's seconds beyond the
    time any compile ran are configure, probes and link steps; the median over the reports."""
    import json

    from cuw.base.errors import CuwError
    from cuw.base.records import seat_entries
    from cuw.partition.costs import compile_span, load, record

    def shard(name: str, build_s: float, bars: list[tuple[str, float, float]], ok: bool = True):
        folder = tmp_path / name / "logs"
        folder.mkdir(parents=True)
        folder.joinpath("seat.jsonl").write_text(
            "".join(
                json.dumps({"action": "compiled", "key": k, "seconds": stop - start, "at": stop, "rc": 0, "outcome": "miss"})
                + "\n"
                for k, start, stop in bars
            )
        )
        report = tmp_path / f"cuw-shard-{name}.report.json"
        report.write_text(
            json.dumps(
                {
                    "gate": "shard",
                    "ok": ok,
                    "build_s": build_s,
                    "reasons": [] if ok else ["compiled 0 TUs"],
                    "build_log": str(folder / "build.log"),
                }
            )
        )
        return report

    one = shard("1of3", 100.0, [("a.cu", 10.0, 50.0), ("b.cu", 30.0, 70.0)])  # span 60 of 80 compile-seconds
    two = shard("2of3", 50.0, [("c.cu", 0.0, 20.0)])
    three = shard("3of3", 90.0, [("d.cu", 0.0, 10.0), ("e.cu", 20.0, 30.0)])
    assert compile_span(seat_entries(tmp_path / "1of3/logs/seat.jsonl")) == 60.0
    got = record([one, two, three], tmp_path / "costs.json")
    assert got.costs == {"a.cu": 40.0, "b.cu": 40.0, "c.cu": 20.0, "d.cu": 10.0, "e.cu": 10.0}
    assert got.shard is not None and got.shard.fixed_s == 40.0  # median of 40, 30, 70
    assert load(tmp_path / "costs.json").shard == got.shard
    failed = shard("4of3", 5.0, [], ok=False)
    with pytest.raises(CuwError, match="did not pass .compiled 0 TUs.: record a passing shard"):
        record([failed], tmp_path / "other.json")
    (tmp_path / "2of3/logs/seat.jsonl").unlink()
    with pytest.raises(CuwError, match="its seat log .* is gone"):
        record([two], tmp_path / "other.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"costs": {"a.cu": 1.0}, "shard": {"fixed_s": -1}}))
    with pytest.raises(CuwError, match="shard must be"):
        load(bad)


def test_tables_learn_cpu_seconds_and_peaks_beside_wall_and_old_tables_stay_readable(tmp_path):
    """A TU compiled twice costs its CPU summed and the larger peak; a hit and an unmeasured line
    (a Windows seat's) add nothing; a later log without the measures drops the stale ones of the
    keys it measured again; a table of wall seconds alone (every committed one) still loads."""
    log = tmp_path / "seat.jsonl"
    entries = [
        {"key": "a.cu", "outcome": "miss", "seconds": 6.0, "cpu_s": 5.5, "peak_mb": 900},
        {"key": "a.cu", "outcome": "miss", "seconds": 2.0, "cpu_s": 1.25, "peak_mb": 1500},
        {"key": "a.cu", "outcome": "hit", "seconds": 0.1, "cpu_s": 0.05, "peak_mb": 30},
        {"key": "b.cu", "outcome": "miss", "seconds": 3.0, "cpu_s": 2.9, "peak_mb": 11500},
        {"key": "c.cpp", "outcome": "miss", "seconds": 1.0},
    ]
    log.write_text("".join(json.dumps({"action": "compiled", "rc": 0, **e}) + "\n" for e in entries))
    out = tmp_path / "costs.json"
    table = record([log], out)
    assert table.costs == {"a.cu": 8.0, "b.cu": 3.0, "c.cpp": 1.0}
    assert table.cpu == {"a.cu": 6.75, "b.cu": 2.9}
    assert table.peaks == {"a.cu": 1500, "b.cu": 11500}
    written = json.loads(out.read_text())
    assert written["peak_mb"] == {"a.cu": 1500, "b.cu": 11500} and written["cpu_s"]["a.cu"] == 6.75
    assert (load(out).cpu, load(out).peaks) == (table.cpu, table.peaks)
    again = record([_seat_log(tmp_path / "s2.jsonl", {"b.cu": 4.0})], out)
    assert (again.costs["b.cu"], again.cpu, again.peaks) == (4.0, {"a.cu": 6.75}, {"a.cu": 1500})
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"header": {}, "costs": {"a.cu": 1.0}}))
    assert (load(old).costs, load(old).cpu, load(old).peaks) == ({"a.cu": 1.0}, {}, {})
    old.write_text(json.dumps({"header": {}, "costs": {"a.cu": 1.0}, "peak_mb": {"a.cu": -1}}))
    with pytest.raises(InputError, match=r"peak_mb\['a.cu'\] = -1 is not a number from 0 to 1e9"):
        load(old)


def test_a_measure_past_the_ceiling_is_refused_so_every_plan_stays_finite(tmp_path, recipes_dir):
    """Each TU at 1.7e308 s passes as a finite float, but their sum is inf: the plan then printed
    inf and wrote Infinity, which is not JSON. A measure over 1e9 is refused; at 1e9 the plan is JSON."""
    keys = sorted(load(recipes_dir / "example" / "costs.json").costs)
    huge = tmp_path / "huge.json"
    huge.write_text(json.dumps({"header": {}, "costs": {k: 1.7e308 for k in keys}}))
    with pytest.raises(InputError, match=r"costs\[.*\] = 1\.7e\+308 is not a number of seconds from 0 to 1e9"):
        load(huge)
    huge.write_text('{"header": {}, "costs": {"a.cu": 1' + "0" * 400 + "}}")
    with pytest.raises(InputError, match=r"= 1000000000000000000000000000000000000\.\.\. is not a number"):
        load(huge)
    ceiling = tmp_path / "ceiling.json"
    ceiling.write_text(json.dumps({"header": {}, "costs": {k: 1e9 for k in keys}}))
    proc = run_cuw("plan", "example", "--costs", str(ceiling), "--format", "json", "--recipes", str(recipes_dir))
    assert proc.returncode in (0, 1) and "Infinity" not in proc.stdout, proc.stderr
    json.loads(proc.stdout, parse_constant=lambda name: pytest.fail(f"{name} in the plan's JSON"))


def test_an_unseen_tu_costs_the_tables_mean_in_every_sum_the_planner_takes():
    """One rule for the planner, the job cap and the plan's shards: wall and CPU of a slice, with
    a TU the table never saw at the table's mean, and a shard's cost beside its compiles."""
    from cuw.partition.costs import CostTable, ShardCost

    table = CostTable({"a": 10.0, "b": 30.0}, cpu={"a": 8.0, "b": 24.0}, shard=ShardCost(5.0))
    assert table.seconds("a") == 10.0 and table.seconds("new") == 20.0
    assert table.wall_of(["a", "new"]) == 30.0
    assert table.cpu_of(["b", "new"]) == 40.0
    assert table.beside_s == 5.0
    bare = CostTable({"a": 10.0})
    assert bare.cpu_of(["a"]) is None and bare.beside_s == 0.0 and bare.wall_of([]) == 0.0
