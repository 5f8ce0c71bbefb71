"""benchmarks/failover.py runs, so it cannot rot: a short run with few clients, in a child
process as it is documented to run, and its report says no client saw an error."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

# slow: a benchmark run, if short; not in the quick subset (README)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def test_a_short_failover_run_reports_no_client_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.failover", "--seconds", "3", "--clients", "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if not line.startswith(" ")] == [
        "passive",
        "probed",
    ]
    phases = [re.search(r"requests +(\d+) +errors +(\d+)", line) for line in lines]
    counts = [(int(m[1]), int(m[2])) for m in phases if m is not None]
    assert len(counts) == 6  # before, after, first second; per mode
    assert all(requests > 0 and errors == 0 for requests, errors in counts)
