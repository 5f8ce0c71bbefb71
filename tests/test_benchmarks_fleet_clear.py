"""benchmarks/fleet_clear.py stays runnable: a real node with two workers, a few clears."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# slow: a benchmark run, if short; not in the quick subset (README)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--workers", "2", "--clears", "5", "--warmup", "2", "--json"]


def test_fleet_clear_times_clears_through_a_real_node() -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.fleet_clear", *ARGS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    [row] = json.loads(completed.stdout)
    assert row["workers"] == 2
    assert row["clears"] == 5  # every one answered 200 Cache cleared, or the run stops
    assert 0 < row["p50_ms"] <= row["p99_ms"] <= row["max_ms"]
    assert set(row["cpu_ms_per_clear"]) == {"control", "valkey", "workers"}
    assert "proxy serve --config" in row["command"]
