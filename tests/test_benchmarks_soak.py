"""benchmarks/soak.py stays runnable and its checks hold: a short soak on a real server.

About 18 s of every kind of traffic (hits, misses past max_bytes, clears every 100 ms, a
token regeneration, slowloris connections, the faulty origin) and one kill -9 with a restart,
then the report: no read stale after a clear's 200, no 5xx but the faulty origin's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

# slow: a benchmark run, if short; not in the quick subset (README)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
ARGS = ["--minutes", "0.3", "--slowloris", "2", "--regenerate-every", "5"]


def test_a_short_soak_reports_no_stale_read_and_no_unexpected_5xx(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", *ARGS, "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    doc = json.loads((tmp_path / "soak.json").read_text())
    assert (tmp_path / "soak.md").read_text().startswith("# Soak")
    assert (tmp_path / "soak.png").read_bytes()[:4] == b"\x89PNG"

    assert doc["stale_after_200"]["stale"] == 0, doc["examples"]
    assert doc["stale_after_200"]["reads_checked"] > 0  # the check had something to check
    assert doc["fivexx"]["unexpected"] == 0, doc["examples"]
    assert doc["fivexx"]["origin_5xx_passed_through"] > 0  # the faulty origin was reached
    assert doc["clears"]["answered_200"] > 0
    assert doc["requests"]["cache_hits"]["read hot"] > 0
    assert doc["token_regenerations"]["count"] >= 1
    assert doc["api_probe"]["outcomes"].get("healthz ok", 0) > 0
    assert doc["slowloris"]["outcomes"]["edge headers opened"] > 0
    [kill] = doc["kills"]  # the kill -9 at the end, counted whatever it lost
    # A kill -9 loses no audit record of a clear answered 200 (the journal, decision 0016).
    assert kill["confirmed"] > 0 and kill["audit_lost"] == 0
    assert len(doc["samples"]) >= 5 and all(rss > 0 for _, rss, _, _ in doc["samples"])
