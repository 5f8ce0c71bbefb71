"""benchmarks/fleet_clear_calls.py, small: it runs under callgrind and prints instructions
per clear for the Python side and Valkey."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

# slow: a fleet clear under callgrind; not in the quick subset (README)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_fleet_clear_calls_runs() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.fleet_clear_calls", "--members", "2", "--clears", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    # Three clears are fewer than the timer work of a loaded machine (Valkey's cron, the
    # members' renewals), which grows with wall time: a difference can come out negative.
    assert re.search(
        r"^members 2: instructions per clear: python -?[\d,]+ k \(-?[\d,]+ k per member,"
        r" purger included\), valkey -?[\d,]+ k",
        completed.stdout,
        re.MULTILINE,
    ), completed.stdout
