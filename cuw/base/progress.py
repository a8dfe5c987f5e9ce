"""Progress of a long step, with rate and time left: one helper for every long step.

On a terminal it is a ``tqdm`` bar; in a CI log (no TTY) it is a plain line at
most every ``every_s`` seconds and at the end, so a 6-hour job's log says how far
it is and when it will end without a line per second. While the count stands
still (one TU can compile for an hour), the line comes again every ``quiet_s``
seconds, so the log shows the job is alive and for how long it has run:

    cuw: shard 3/23: compiled 5/7 TUs, 0.04 TUs/s, 2:05 elapsed, about 0:50 left
"""

from __future__ import annotations

import sys
import time
from typing import IO, Callable, Optional

from tqdm import tqdm

Say = Callable[[str], None]


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Meter:
    """``update(done)`` with the absolute count; ``close()`` prints the last line."""

    def __init__(
        self,
        label: str,
        total: Optional[int],
        unit: str = "TUs",
        say: Optional[Say] = None,
        every_s: float = 30.0,
        quiet_s: float = 300.0,
        stream: Optional[IO[str]] = None,
        terminal: Optional[bool] = None,
    ) -> None:
        self.label, self.total, self.unit, self.every_s, self.quiet_s = label, total, unit, every_s, quiet_s
        self.stream = stream or sys.stderr
        self.say = say or (lambda line: print(f"cuw: {line}", file=self.stream, flush=True))
        self.started = time.monotonic()
        self.done = 0
        self._last_line = float("-inf")
        self._last_done: Optional[int] = None
        use_bar = self.stream.isatty() if terminal is None else terminal
        self.bar: Optional[tqdm] = (
            tqdm(total=total, desc=label, unit=f" {unit}", file=self.stream, dynamic_ncols=True, leave=True) if use_bar else None
        )

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        of = f"/{self.total}" if self.total is not None else ""
        text = f"{self.label} {self.done}{of} {self.unit}, {rate:.2f} {self.unit}/s, {_clock(elapsed)} elapsed"
        if self.total and rate > 0 and self.done < self.total:
            text += f", about {_clock((self.total - self.done) / rate)} left"
        return text

    def update(self, done: int) -> None:
        if self.bar is not None:
            self.bar.update(done - self.done)
            self.done = done
            return
        self.done = done
        now = time.monotonic()
        first = self._last_done is None
        since = now - self._last_line
        if first or (done != self._last_done and since >= self.every_s) or since >= self.quiet_s:
            self.say(self.line())
            self._last_line, self._last_done = now, done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            return
        if self._last_done != self.done:
            self.say(self.line())
            self._last_done = self.done
