"""Run wrk on the load core and read its summary: requests/s and the latency percentiles."""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
from dataclasses import dataclass

_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}
_PERCENTILE = re.compile(r"^\s*(50|75|90|99)%\s+([\d.]+)(us|ms|s|m)\s*$", re.MULTILINE)
_RPS = re.compile(r"^Requests/sec:\s+([\d.]+)", re.MULTILINE)
_TOTAL = re.compile(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m)", re.MULTILINE)
_NON_2XX = re.compile(r"Non-2xx or 3xx responses:\s+(\d+)")
_SOCKET_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")


class WrkError(Exception):
    """wrk failed, or its output could not be read."""


@dataclass(frozen=True, slots=True)
class WrkResult:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int
    socket_errors: int

    def as_dict(self) -> dict[str, float]:
        return {
            "rps": self.rps,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "requests": self.requests,
            "non_2xx": self.non_2xx,
            "socket_errors": self.socket_errors,
        }


def wrk_binary() -> str | None:
    return shutil.which("wrk")


def command(
    port: int,
    path: str,
    host: str,
    seconds: int,
    connections: int = 32,
    cpu: str = "0",
    threads: int = 1,
) -> list[str]:
    return [
        "taskset",
        "-c",
        cpu,
        wrk_binary() or "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{seconds}s",
        "--latency",
        "-H",
        f"Host: {host}",
        f"http://127.0.0.1:{port}{path}",
    ]


def parse(text: str) -> WrkResult:
    percentiles = {p: float(v) * _UNITS[u] for p, v, u in _PERCENTILE.findall(text)}
    rps = _RPS.search(text)
    total = _TOTAL.search(text)
    if rps is None or total is None or "50" not in percentiles or "99" not in percentiles:
        raise WrkError(f"cannot read wrk's output:\n{text}")
    non_2xx = _NON_2XX.search(text)
    errors = _SOCKET_ERRORS.search(text)
    return WrkResult(
        rps=float(rps.group(1)),
        p50_ms=percentiles["50"],
        p99_ms=percentiles["99"],
        requests=int(total.group(1)),
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sum(int(g) for g in errors.groups()) if errors else 0,
    )


async def run(argv: list[str]) -> WrkResult:
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await process.communicate()
    text = out.decode(errors="replace")
    if process.returncode != 0:
        raise WrkError(f"{shlex.join(argv)} exited {process.returncode}:\n{text}")
    return parse(text)
