"""The flood filter (proxy/observe/log_floods.py): one line per template per interval on the
loggers a client reaches, the count of those held back on the next, no traceback below
DEBUG; other loggers and unmarked info lines untouched."""

from __future__ import annotations

import logging

from proxy.observe.log_floods import THROTTLED, FloodFilter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def record(name: str, level: int, msg: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord(name, level, __file__, 1, msg, args, None)
    made.__dict__.update(extra)
    return made


def test_one_line_per_interval_then_the_count() -> None:
    clock = Clock()
    floods = FloodFilter(every=10, clock=clock)
    passed = [floods.filter(record("proxy.edge", logging.WARNING, "%s", n)) for n in range(500)]
    assert passed == [True] + [False] * 499
    clock.now += 10
    late = record("proxy.edge", logging.WARNING, "%s", "late")
    assert floods.filter(late)
    assert (
        late.getMessage()
        == "late (499 more like it since the last such line, at most one per 10 s)"
    )


def test_other_loggers_templates_and_info_lines_pass() -> None:
    floods = FloodFilter(every=10, clock=Clock())
    for _ in range(3):
        assert floods.filter(record("proxy.reload", logging.WARNING, "reload %s", "x"))
        # The listeners' ThrottledLines, one template for several kinds, each its own throttle.
        assert floods.filter(record("proxy.connections", logging.WARNING, "%s (%d since)", "a", 1))
        assert floods.filter(record("proxy.dashboard", logging.INFO, "token %s created", "t"))
    assert floods.filter(record("proxy.edge", logging.WARNING, "one %s", 1))
    assert floods.filter(record("proxy.edge", logging.WARNING, "another %s", 1))
    assert floods.filter(record("proxy.dashboard", logging.INFO, "failed %s", 1, **THROTTLED))
    assert not floods.filter(record("proxy.dashboard", logging.INFO, "failed %s", 2, **THROTTLED))


def test_a_traceback_becomes_one_line() -> None:
    try:
        raise ValueError("bad\nbytes")
    except ValueError as exc:
        failed = logging.LogRecord(
            "proxy.api",
            logging.ERROR,
            __file__,
            1,
            "unexpected %s",
            ("GET",),
            (ValueError, exc, exc.__traceback__),
        )
    api = logging.getLogger("proxy.api")
    level = api.level
    api.setLevel(logging.INFO)
    try:
        assert FloodFilter(clock=Clock()).filter(failed)
    finally:
        api.setLevel(level)
    assert failed.exc_info is None
    assert failed.getMessage().startswith("unexpected GET: ValueError: bad bytes at ")
