"""CPU time the proxy spends on each clear-cache request, all of its threads together.

Run: taskset -c 1 .venv/bin/python -m benchmarks.clear_cpu [--rate 100] [--seconds 10]

cdn-proxy is started on core 0 (the runner pins itself elsewhere), with a token, in front of
the benchmark origin. The clear-cache API is then called ``--rate`` times a second for
``--seconds`` (the schedule of scenario 3, benchmarks/load.py clear_loop), and the process's
user and system CPU time (/proc/PID/task/*/stat) over that time, less what it uses idle, is
divided by the number of clears. At scenario 3's rate every clear's CPU is taken from the
hits on the same core, so this is what a clear costs them. Tick-based: runs of the same code
differ by about 10%.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from benchmarks import load
from benchmarks.systems import Origin, Ours, Setting

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> dict[str, float]:
    """User and system CPU seconds of the main thread and of the others."""
    totals = {"main": 0.0, "other threads": 0.0}
    for task in os.listdir(f"/proc/{pid}/task"):
        fields = Path(f"/proc/{pid}/task/{task}/stat").read_text().rsplit(")", 1)[1].split()
        which = "main" if task == str(pid) else "other threads"
        totals[which] += (int(fields[11]) + int(fields[12])) / TICK
    return totals


async def measure(rate: float, seconds: float, server_cpu: str, load_cpu: str) -> str:
    with tempfile.TemporaryDirectory(prefix="cdn-proxy-clear-cpu-") as name:
        tmp = Path(name)
        origin = Origin(tmp, load_cpu, slow_ms=0.0)
        ours = None
        try:
            ours = Ours(Setting(tmp, origin.port, server_cpu, [1024]))
            pid = ours.cache_pid()
            await load.fill(ours.port, "a.example", (f"/o/1024/{i}" for i in range(100)))
            idle_start, started = cpu_seconds(pid), time.perf_counter()
            await asyncio.sleep(min(seconds, 5.0))
            idle_seconds = time.perf_counter() - started
            idle = {k: (v - idle_start[k]) / idle_seconds for k, v in cpu_seconds(pid).items()}
            headers, body = ours.clear_request("a.example")
            stop = asyncio.Event()
            before, started = cpu_seconds(pid), time.perf_counter()
            task = asyncio.create_task(
                load.clear_loop(
                    ours.api_port, "/api/v1/cdn/clear-cache", "127.0.0.1", headers, body, rate, stop
                )
            )
            await asyncio.sleep(seconds)
            stop.set()
            result = await task
            elapsed = time.perf_counter() - started
            after = cpu_seconds(pid)
        finally:
            if ours is not None:
                ours.stop()
            origin.stop()
    if result.ok != result.sent:
        raise SystemExit(f"only {result.ok} of {result.sent} clears answered 200")
    per_clear = {k: (after[k] - before[k] - idle[k] * elapsed) / result.sent for k in after}
    parts = ", ".join(f"{k} {v * 1000:.2f} ms" for k, v in per_clear.items())
    total = sum(per_clear.values()) * 1000
    return f"{total:.2f} ms of CPU per clear ({parts}); {result.sent} clears at {rate:g}/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--server-cpu", default="0")
    parser.add_argument("--load-cpu", default="1")
    args = parser.parse_args()
    print(asyncio.run(measure(args.rate, args.seconds, args.server_cpu, args.load_cpu)))


if __name__ == "__main__":
    main()
