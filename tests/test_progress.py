"""The one progress helper: plain periodic lines with rate and time left in CI logs, a bar on a terminal."""

from __future__ import annotations

import io
import re
import time

from cuw.base.progress import Meter


def test_ci_lines_carry_rate_and_time_left_and_are_not_a_flood():
    lines: list[str] = []
    meter = Meter("shard 3/23: compiled", 10, "TUs", say=lines.append, every_s=0.2, terminal=False)
    for done in range(1, 6):
        meter.update(done)
        time.sleep(0.05)
    assert len(lines) <= 3, lines  # 5 updates in ~0.25 s: the first, then at most one per 0.2 s
    assert re.fullmatch(r"shard 3/23: compiled 1/10 TUs, [\d.]+ TUs/s, 0:00 elapsed, about 0:\d\d left", lines[0]), lines[0]
    meter.update(10)
    meter.close()
    assert lines[-1].startswith("shard 3/23: compiled 10/10 TUs, ") and "left" not in lines[-1]


def test_a_count_standing_still_is_said_again_every_quiet_period(monkeypatch):
    """One TU compiling for an hour: the CI log still gets a line every quiet_s, with the time run."""
    now = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    lines: list[str] = []
    meter = Meter("shard 30/40: compiled", 4, "TUs", say=lines.append, every_s=30, quiet_s=300, terminal=False)
    meter.update(2)
    for _ in range(20 * 60):  # 20 minutes of one-second polls, the count at 2
        now[0] += 1
        meter.update(2)
    assert [line.split(", ")[2] for line in lines] == [
        "0:00 elapsed",
        "5:00 elapsed",
        "10:00 elapsed",
        "15:00 elapsed",
        "20:00 elapsed",
    ]
    assert all(line.startswith("shard 30/40: compiled 2/4 TUs") for line in lines)


def test_a_terminal_gets_a_bar_with_rate():
    out = io.StringIO()
    meter = Meter("link: restored", 4, "archives", stream=out, terminal=True)
    for done in range(1, 5):
        meter.update(done)
    meter.close()
    text = out.getvalue()
    assert "link: restored" in text and "4/4" in text and "archives/s" in text
