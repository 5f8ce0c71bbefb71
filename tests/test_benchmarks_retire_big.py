"""benchmarks.retire_big runs: every covered entry goes with its record, the others stay,
and the purge state is back to the domain's small record."""

from __future__ import annotations

import re
import subprocess
import sys


def test_the_big_retirement_benchmark_runs_small() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.retire_big", "--entries", "3000", "--purges", "1200"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    assert "entries 3000 " in out
    passes = re.search(
        r"passes (\d+), .* entries left (\d+); purge state (\d+) bytes; faults 0", out
    )
    assert passes is not None, out
    assert int(passes[1]) == 2  # 1,024 URLs a pass
    assert int(passes[2]) == 1800
    assert int(passes[3]) < 100
    assert "a purged URL: 0 variants" in out and "a kept one: 1" in out
