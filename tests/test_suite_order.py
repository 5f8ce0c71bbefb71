"""The suite's order (tests/conftest.py, issue 34): the modules with the longest tests run
first, then the other modules with slow tests, then the rest, each module's tests together."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LONGEST_FIRST

ROOT = Path(__file__).resolve().parent.parent


def test_every_module_named_longest_first_exists() -> None:
    assert [name for name in LONGEST_FIRST if not (ROOT / name).is_file()] == []


@pytest.mark.slow  # a pytest process collecting four modules: seconds
def test_the_longest_modules_run_first_then_the_slow_ones_each_module_in_one_piece() -> None:
    modules = [
        "tests/core/test_clear_figures.py",  # no slow test
        "tests/test_reload.py",  # some slow tests
        "tests/fleet/test_checker.py",  # in LONGEST_FIRST, after the smoke run
        "tests/test_benchmarks_smoke.py",
    ]
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    completed = subprocess.run(
        [*command, *modules],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    ids = [line for line in completed.stdout.splitlines() if "::" in line]
    order = [ident.split("::", 1)[0] for ident in ids]
    runs = [
        module for index, module in enumerate(order) if index == 0 or order[index - 1] != module
    ]
    assert runs == [modules[3], modules[2], modules[1], modules[0]], runs
