"""The benchmark runner's smoke mode: every scenario path runs, so the runner cannot rot.

It starts real servers (the origin, cdn-proxy, the floor, the aiohttp-client-cache peer, and
nginx and Varnish when installed) on loopback, drives them with wrk, and writes its report
into a temporary directory, never into benchmarks/results. wrk is required: scripts/test
installs it, so a missing wrk is a failure here, not a skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# slow: benchmark runs, if short; not in the quick subset (README)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = {
    "1. Hit throughput and latency": "cdn-proxy",
    "2. Clearing a domain": "cdn-proxy",
    "3. Hits on one domain while another is cleared": "clearing",
    "4. Memory per cached object": "cdn-proxy",
    "5. Origin protection right after a clear": "cdn-proxy",
    "6. Whole-machine hits": "cdn-proxy-2w",
}


def sections(markdown: str) -> dict[str, str]:
    """Level-2 headings and the text under each."""
    parts = re.split(r"^## (.+)$", markdown, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def table_rows(text: str) -> list[str]:
    return [
        line for line in text.splitlines() if line.startswith("| ") and not line.startswith("|--")
    ]


def test_smoke_run_writes_every_scenario(tmp_path: Path) -> None:
    assert shutil.which("wrk"), "wrk is required for the benchmark smoke run (apt-get install wrk)"
    out = tmp_path / "results"
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--smoke", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]

    markdown = (out / "latest.md").read_text()
    png = (out / "latest.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) > 10_000

    found = sections(markdown)
    for heading, row_word in SECTIONS.items():
        title = next((t for t in found if t.startswith(heading)), None)
        assert title is not None, f"no section {heading!r} in:\n{markdown}"
        rows = [row for row in table_rows(found[title]) if row_word in row]
        assert len(rows) >= 1, f"no {row_word!r} row under {title!r}:\n{found[title]}"
        assert "```sh" in found[title], f"no commands under {title!r}"

    budget = table_rows(found["Budget (issue 4)"])
    assert len(budget) >= 9, budget  # header + a row per budget line
    assert all(("PASS" in row or "MISS" in row) for row in budget[1:]), budget

    hits = table_rows(found["1. Hit throughput and latency"])
    assert any("floor" in row for row in hits), "the floor must be measured"

    raw = list((out / "raw").glob("*-smoke.json"))
    assert len(raw) == 1
    data = json.loads(raw[0].read_text())
    assert data["profile"]["name"] == "smoke"
    # Every hit was a hit: nothing reached the origin during the wrk runs.
    assert all(row["origin_requests"] == 0 for row in data["hits"]["rows"]), data["hits"]["rows"]
    # ... on every core too, with two cdn-proxy workers each holding the object.
    machine = data["machine_hits"]["rows"]
    assert {row["system"] for row in machine} >= {"cdn-proxy-2w", "cdn-proxy"}, machine
    assert all(row["origin_requests"] == 0 for row in machine), machine
    # Clears are real: the next request after each clear went to the origin.
    assert all(row["verified"] for row in data["clear_http"]["rows"])


def run_script(*args: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    return completed.stdout


def test_gc_pause_runs() -> None:
    """benchmarks/gc_pause.py, small: it fills a real service and times full collections."""
    out = run_script("benchmarks.gc_pause", "--entries", "300", "--runs", "2")
    assert re.search(
        r"^full collection with 300 entries cached: [\d.]+ ms \(median of 2\); "
        r"[\d.]+ tracked objects per entry$",
        out,
        re.MULTILINE,
    ), out


def test_clear_cpu_runs() -> None:
    """benchmarks/clear_cpu.py, short: every clear is answered 200 and its CPU is reported."""
    out = run_script("benchmarks.clear_cpu", "--seconds", "1", "--rate", "50")
    assert re.search(
        r"^-?[\d.]+ ms of CPU per clear \(main -?[\d.]+ ms, other threads -?[\d.]+ ms\); "
        r"\d+ clears at 50/s$",
        out,
        re.MULTILINE,
    ), out


def test_soft_purge_runs_and_counts_what_the_origin_sent() -> None:
    """benchmarks/soft_purge.py, small: after a hard purge every object is fetched whole once
    (collapsed); after a soft one, revalidated once each (a 304), whole bodies never."""
    cpu = str(min(os.sched_getaffinity(0)))
    out = run_script(
        "benchmarks.soft_purge",
        *("--clients", "5", "--objects", "3", "--runs", "1", "--before", "0.3"),
        *("--after", "0.5", "--server-cpu", cpu, "--load-cpu", cpu),
    )
    rows = dict(re.findall(r"^\| (hard|soft|soft\+swr) \| (\d+ \| \d+) \|", out, re.MULTILINE))
    assert rows == {"hard": "3 | 0", "soft": "0 | 3", "soft+swr": "0 | 3"}, out


def test_http2_runs() -> None:
    """benchmarks/http2.py, short: h2load gets every answer (2xx) from cdn-proxy and nginx,
    over HTTP/2 and HTTP/1.1 on TLS, and the table has a figure for each."""
    assert shutil.which("h2load"), "h2load is required (apt-get install nghttp2-client)"
    out = run_script("benchmarks.http2", "--runs", "1", "--duration", "1")
    for system in ("cdn-proxy", "nginx"):
        for protocol in ("HTTP/2", "HTTP/1.1"):
            pattern = rf"^{system} +{re.escape(protocol)} +[\d,]+ +[\d.]+$"
            assert re.search(pattern, out, re.MULTILINE), out


def test_http2_layers_runs() -> None:
    """benchmarks/http2.py --layers, small: h2's state machine and the edge's own frame layer
    each answer the same requests, and the table has a figure for each."""
    out = run_script("benchmarks.http2", "--layers", "200")
    for layer in ("h2", "own"):
        assert re.search(rf"^{layer} +[\d.]+ µs +[\d.]+ µs$", out, re.MULTILINE), out
