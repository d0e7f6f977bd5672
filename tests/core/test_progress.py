"""The progress line of long runs: drawn on a terminal's stderr, silent when piped or under --json,
throttled by an injected clock (no sleeping), erased on close; run_space reports every input once."""
from __future__ import annotations

import io

from nsa_policy.progress import Progress, is_terminal


class Stream(io.StringIO):
    """A stderr stand-in that says whether it is a terminal."""

    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        if self.closed:  # as a real stream does
            raise ValueError("I/O operation on closed file")
        return self.tty


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_terminal_gets_a_line_redrawn_in_place_and_erased():
    stream, clock = Stream(tty=True), Clock()
    with Progress("check sglang-0.5.22", 1000, stream=stream, clock=clock, interval=0.5) as bar:
        bar.advance(100)  # first update: drawn
        clock.now += 0.1
        bar.advance(100)  # within the interval: not redrawn
        assert stream.getvalue().count("\r") == 1
        clock.now += 0.5
        bar.advance(300)
        assert stream.getvalue().endswith("check sglang-0.5.22: 500/1000 (50 %) 1 s, 833/s")  # 500 in 0.6 s
        bar.update(1000)  # completion is always drawn
        assert "1000/1000 (100 %)" in stream.getvalue()
    text = stream.getvalue()
    assert text.count("\r") == 3 + 2  # three draws, and the erase (\r blanks \r)
    assert text.endswith("\r") and text.rsplit("\r", 2)[1].strip() == ""  # the last line is blanked out
    assert "\n" not in text  # nothing scrolls


def test_a_pipe_gets_nothing():
    stream = Stream(tty=False)
    with Progress("diff --releases", 10, stream=stream, clock=Clock()) as bar:
        for _ in range(10):
            bar.advance()
        assert bar.done == 10  # it still counts
    assert stream.getvalue() == ""


def test_quiet_silences_a_terminal_too():
    stream = Stream(tty=True)
    with Progress("check", 5, stream=stream, quiet=True, clock=Clock()) as bar:
        bar.advance(5)
    assert stream.getvalue() == ""


def test_streams_without_isatty_or_closed_are_not_terminals():
    closed = Stream(tty=True)
    closed.close()
    assert not is_terminal(closed)
    assert not is_terminal(None)
    assert not is_terminal(object())  # type: ignore[arg-type]


def test_a_vanished_terminal_stops_drawing_without_failing():
    stream = Stream(tty=True)
    bar = Progress("x", 3, stream=stream, clock=Clock())
    stream.close()  # writes now raise ValueError
    bar.advance()
    bar.advance()
    bar.close()
    assert bar.done == 2 and not bar.enabled


def test_threads_may_advance_it():
    """A harness reading several worker processes' answers advances from several threads: no count is lost."""
    import threading

    stream = Stream(tty=True)
    bar = Progress("oracle", 8000, stream=stream, clock=Clock())
    threads = [threading.Thread(target=lambda: [bar.advance() for _ in range(1000)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bar.done == 8000 and "8000/8000 (100 %)" in stream.getvalue()
    bar.close()


def test_run_space_reports_every_input_once():
    from nsa_policy.core.bundle import get_bundle
    from nsa_policy.verify.run import run_space
    from nsa_policy.verify.space import Space, standard_space

    bundle = get_bundle("sglang-0.5.22")
    extras = next(b for b in standard_space([bundle]).blocks if b.name == "extras")
    small = Space((extras,))  # a few thousand inputs: over the in-process ranges threshold
    seen: list[int] = []
    ranged = run_space(bundle, small, workers=1, progress=seen.append)
    assert sum(seen) == len(small) and len(seen) > 1  # reported between ranges, not only at the end
    assert ranged.records == run_space(bundle, small, workers=1).records  # the ranges change no result
    assert ranged.matched == run_space(bundle, small, workers=1).matched
