"""A one-line progress counter for long runs (`check` of every bundle, `diff --releases`, the
differential harness): on stderr, and only when stderr is a terminal, so piped or captured output
(CI logs, `--json`, `> file`) stays exactly what it was.

    from nsa_policy.progress import Progress

    with Progress("check sglang-0.5.22", total=len(space), quiet=as_json) as bar:
        for chunk in chunks:
            ...
            bar.advance(len(chunk))

The line is redrawn in place (carriage return) at most every `interval` seconds, and erased on close,
so nothing of it is left in a terminal's scroll-back either. Output is ASCII only. `advance` may be
called from several threads (a harness that reads several worker processes' answers).
"""
from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import Callable, Optional, TextIO


def is_terminal(stream: Optional[TextIO]) -> bool:
    """Does `stream` go to a terminal? False for pipes, files, pytest's capture, and closed streams."""
    if stream is None:
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or closed
        return False


class Progress:
    """`label: done/total (pct) elapsed` on stderr while stderr is a terminal; silent otherwise.

    `quiet=True` (e.g. under `--json`) silences it even on a terminal. `stream` and `clock` are
    injectable so tests can drive it without a terminal or sleeping.
    """

    def __init__(self, label: str, total: int, *, quiet: bool = False, stream: Optional[TextIO] = None,
                 clock: Callable[[], float] = time.monotonic, interval: float = 0.2):
        self.stream = sys.stderr if stream is None else stream
        self.enabled = not quiet and is_terminal(self.stream)
        self.label = label
        self.total = max(0, int(total))
        self.done = 0
        self.clock = clock
        self.interval = interval
        self.started = clock()
        self._drawn_at: Optional[float] = None
        self._width = 0  # the longest line drawn, to blank it out on close
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ updates

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self._set(self.done + n, None)

    def update(self, done: int, label: Optional[str] = None) -> None:
        """Set the count (and optionally the label); redraw if the interval has passed or it is complete."""
        with self._lock:
            self._set(done, label)

    def _set(self, done: int, label: Optional[str]) -> None:
        self.done = min(max(0, done), self.total) if self.total else max(0, done)
        if label is not None:
            self.label = label
        if not self.enabled:
            return
        now = self.clock()
        if self._drawn_at is None or now - self._drawn_at >= self.interval or self.done == self.total:
            self._draw(now)

    def line(self, now: Optional[float] = None) -> str:
        """The text of the progress line (also what tests look at)."""
        elapsed = (self.clock() if now is None else now) - self.started
        rate = f", {self.done / elapsed:.0f}/s" if elapsed > 0 and self.done else ""
        if self.total:
            pct = 100.0 * self.done / self.total
            return f"{self.label}: {self.done}/{self.total} ({pct:.0f} %) {elapsed:.0f} s{rate}"
        return f"{self.label}: {self.done} {elapsed:.0f} s{rate}"

    def _draw(self, now: float) -> None:
        text = self.line(now)
        self._width = max(self._width, len(text))
        try:
            self.stream.write("\r" + text.ljust(self._width))
            self.stream.flush()
        except (OSError, ValueError):  # the terminal went away: stop drawing, never fail the run
            self.enabled = False
            return
        self._drawn_at = now

    def close(self) -> None:
        """Erase the line (the terminal is left as it was before the run)."""
        with self._lock:
            self._erase()

    def _erase(self) -> None:
        if self.enabled and self._drawn_at is not None:
            try:
                self.stream.write("\r" + " " * self._width + "\r")
                self.stream.flush()
            except (OSError, ValueError):
                pass
        self.enabled = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()


__all__ = ["Progress", "is_terminal"]
