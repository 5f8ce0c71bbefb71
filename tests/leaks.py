"""Sockets and transports a test module leaves open, found at the end of that module.

An unclosed socket or transport warns (``ResourceWarning``, an error under this suite's
``filterwarnings``) when the garbage collector finds it, and that may happen in any later test:
twice in CI a test of ``test_reload.py`` failed for a client socket that some earlier module had
left open (the test passes alone). So the collector runs at the end of each module, and the
ResourceWarnings it raises there are listed at the end of the run under that module's name,
where to look, instead of failing whichever test happens to be running. Any other exception
raised in a finaliser still fails the run, as pytest reports it.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from typing import Any

import pytest

LEFT_OPEN: list[str] = []


@pytest.fixture(scope="module", autouse=True)
def collect_what_the_module_left(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    module = request.module.__name__
    previous = sys.unraisablehook

    def found(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, ResourceWarning):
            LEFT_OPEN.append(f"{module}: {unraisable.exc_value}")
        else:
            previous(unraisable)

    sys.unraisablehook = found
    try:
        gc.collect()
    finally:
        sys.unraisablehook = previous


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A pytest-xdist worker hands what it found to the controller, which prints the run's
    summary (``workeroutput`` is xdist's channel back; absent in a run without workers)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["left_open"] = list(LEFT_OPEN)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """On the controller: a worker's findings join the summary."""
    LEFT_OPEN.extend(getattr(node, "workeroutput", {}).get("left_open", []))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if LEFT_OPEN:
        terminalreporter.section("left open by a test module (found when it ended)")
        for line in LEFT_OPEN:
            terminalreporter.line(line)
