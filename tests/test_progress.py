"""Progress bars: drawn on a terminal only, with log lines above them, never across."""

import io
import logging
import sys

from seq2seq import progress
from tests.conftest import Terminal


def _standard_error(monkeypatch, screen: io.StringIO) -> io.StringIO:
    """Standard error replaced by ``screen``, the root logger printing there (as the commands'
    ``logging.basicConfig`` sets it up). Called in the test itself: pytest puts its own standard
    error back after the fixtures."""
    monkeypatch.setattr(sys, "stderr", screen)
    handler = logging.StreamHandler(screen)
    monkeypatch.setattr(logging.root, "handlers", [handler])
    monkeypatch.setattr(logging.root, "level", logging.INFO)
    return screen


def _shown_lines(text: str) -> list[str]:
    """What stays on each line of the screen: the text after its last carriage return."""
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n")]


def test_a_log_line_prints_above_the_bar_not_after_it(monkeypatch):
    terminal = _standard_error(monkeypatch, Terminal())
    with progress.bar(10, "step", "training") as bar:
        bar.update(3)
        logging.getLogger("seq2seq.test").info("validation at step 3: bleu 1.0")
        bar.update(7)
    assert "validation at step 3: bleu 1.0" in _shown_lines(terminal.getvalue())
    assert "training: 100%" in terminal.getvalue() and "10/10" in terminal.getvalue()
    # and once the bar is gone, log lines go where they went before it
    assert logging.root.handlers[0].stream is terminal


def test_without_a_terminal_there_is_no_bar_and_logging_is_untouched(monkeypatch):
    piped = _standard_error(monkeypatch, io.StringIO())
    handlers = list(logging.root.handlers)
    with progress.bar(10, "step", "training") as bar:
        assert logging.root.handlers == handlers
        bar.update(10)
        logging.getLogger("seq2seq.test").info("a line for the log file")
    assert piped.getvalue() == "a line for the log file\n"


def test_work_too_short_to_watch_draws_no_bar_even_on_a_terminal(monkeypatch):
    terminal = _standard_error(monkeypatch, Terminal())
    with progress.bar(1, "checkpoint", "averaging", draw=False) as bar:
        bar.update(1)
    assert terminal.getvalue() == ""


def test_without_a_terminal_long_work_that_asks_logs_a_line_a_minute(monkeypatch):
    """``eval.py`` into a log file decoded for 138 s and said nothing until its result."""
    piped = _standard_error(monkeypatch, io.StringIO())
    clock = iter([0.0, 30.0, 61.0, 90.0, 130.0, 190.0])  # start, then one reading per update
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    with progress.bar(1000, "sentence", "translating", lines=True) as bar:
        for _ in range(5):
            bar.update(100)  # at 30 s (too soon), 61 s, 90 s (too soon), 130 s and 190 s
    assert piped.getvalue().splitlines() == [
        "translating: 200 of 1,000 sentences (20%), about 4 min to go",  # 800 more at 200/61 s
        "translating: 400 of 1,000 sentences (40%), about 3 min to go",  # 600 at 400/130 s
        "translating: 500 of 1,000 sentences (50%), about 3 min to go",
    ]
    with progress.bar(1000, "sentence", "translating", lines=False) as bar:  # it logs its own
        bar.update(1000)
    assert len(piped.getvalue().splitlines()) == 3
