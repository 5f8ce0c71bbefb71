"""The soak of issue 13: a real server under mixed traffic and abuse for N minutes.

Run: .venv/bin/python -m benchmarks.soak [--minutes 3] [--out DIR] [--workers 2]
         [--kill-every MINUTES] [--max-bytes 32MiB] [--disk [--disk-max-bytes 1GiB]]
         [--server-cpu 1] [--load-cpu 0]
         [--no-abuse] [--range-rate 50] [--trickles 96] [--attack-idle 900]
         [--attack-tunnels 300] [--purge-every 0.5] [--h2]

It starts ``python -m proxy serve`` (one process, or ``--workers N`` edge processes) pinned
with ``taskset`` to the server core, and an origin it controls (benchmarks/soak_origin.py,
in this process on the load core). Then, all at once (benchmarks/soak_load.py): hits,
misses over a key space four times ``cache.max_bytes``, a clear every 100 ms through the API
with the origin's version bumped just before each, token regenerations through the CLI,
slowloris connections on the edge and the API, and a faulty origin (slow answers, its own
5xx, resets mid-body). With them, unless ``--no-abuse``, the second round's attacks (issue 24,
benchmarks/soak_abuse.py): small ranges that cost the origin whole objects, request bodies
trickled after their first MiB, one address holding more connections and tunnels than its
share while a second address makes ordinary requests, and a purge flood. With ``--h2``, the
third round's HTTP/2 attacks too (issue 32, benchmarks/soak_h2.py: zero-window readers,
trickled bodies on 128 streams, large header blocks, compression misses; h2c on, smaller
budgets), and a second client's HTTP/2 hits timed (``h2`` in the report). Every second it
samples the server's RSS, PSS and open fds (all its processes, from /proc: PSS counts a page
mapped by several processes once, as the shared tier's map is) and probes the API
(``/healthz`` and a clear).

Every body carries its domain's version: a read that starts after a clear's 200 and returns
an older version is **stale after 200**. Every 5xx is put in one of three bins: the origin's
own (marked ``X-Soak-Fault``), the edge's 502/504 for an origin fault on purpose, and
**unexpected** (any other).

At the end (and every ``--kill-every`` minutes), right after a clear's 200 and with the
traffic running, the server is killed with SIGKILL and started again on the same state; the
clears answered 200 by the killed server whose audit record is missing from the state
database after the restart are **audit records lost**. Last, the server gets SIGTERM.

The report goes to ``--out`` (default: a new temporary directory): ``soak.json`` (every
figure, and the samples), ``soak.md`` (the summary) and ``soak.png`` (RSS and fds over time).
The exit status is 1 when there were stale reads or unexpected 5xx, else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.soak_abuse import Abuse, AbuseSettings
from benchmarks.soak_h2 import MixedH2
from benchmarks.soak_load import DOMAINS, FLOODED, Live, Settings, Traffic
from benchmarks.soak_origin import SoakOrigin
from benchmarks.soak_report import Tally, audit_lost, chart, figures, markdown
from benchmarks.soak_server import SoakServer
from benchmarks.systems import ROOT

OBJECT_BYTES = 4096
AFTER_LAST_KILL = 3.0  # seconds of traffic after the last restart: does everything recover?
AUDIT_SETTLE = 1.0  # a second look at the audit log, for records written after a restart


async def soak(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    tally, live = Tally(), Live()
    origin = SoakOrigin(object_bytes=OBJECT_BYTES, slow_max=args.slow_max, seed=args.seed)
    await origin.start()
    server = SoakServer(
        out / "server",
        origin_url=origin.url,
        domains=DOMAINS,
        max_bytes=args.max_bytes,
        workers=args.workers,
        cpu=args.server_cpu,
        disk_max_bytes=args.disk_max_bytes if args.disk else None,
    )
    load_before = os.getloadavg()
    mixed_h2 = MixedH2() if args.h2 else None  # issue 32's HTTP/2 attacks (soak_h2.py)
    try:
        if mixed_h2 is not None:
            await mixed_h2.prepare(server)
        await server.start()
        live.up = True
        tokens = {
            actor: await server.token("create", actor, "--all-domains")
            for actor in ("soak", "probe", "loris")
        }
        settings = Settings(
            cold_keys=4 * args.max_bytes // OBJECT_BYTES,
            regenerate_every=args.regenerate_every,
            slowloris=args.slowloris,
            slowloris_hold=args.slowloris_hold,
            seed=args.seed,
        )
        traffic = Traffic(server, origin, tally, live, tokens, settings)
        abuse = None
        if not args.no_abuse:
            flood_token = await server.token("create", "flood", "--domain", FLOODED)
            abuse = Abuse(server, origin, tally, live, flood_token, _abuse_settings(args))
        began = time.monotonic()
        sampler = asyncio.create_task(_sample(server, tally, began, traffic.stopping))
        traffic.start()
        if abuse is not None:
            abuse.start()
        if mixed_h2 is not None:
            mixed_h2.start(server)
        await _run(args, server, traffic, tally, live, began)
        if abuse is not None:
            await abuse.stop()
        if mixed_h2 is not None:
            await mixed_h2.stop()
        await traffic.stop()
        await sampler
        seconds = time.monotonic() - began
        stop_seconds = await server.stop()
    finally:
        await server.kill()
        await origin.close()
        if mixed_h2 is not None:
            await mixed_h2.close()
    settings_doc = _settings_doc(args, server, settings, seconds, stop_seconds, load_before)
    settings_doc["origin_requests"] = dict(sorted(origin.counts.items()))
    doc = figures(tally, settings_doc)
    if abuse is not None:
        doc["abuse"] = abuse.figures()
    if mixed_h2 is not None:
        doc["h2"] = mixed_h2.figures()
    return doc


def _settings_doc(
    args: argparse.Namespace,
    server: SoakServer,
    settings: Settings,
    seconds: float,
    stop_seconds: float | None,
    load_before: tuple[float, float, float],
) -> dict[str, Any]:
    return {
        "command": shlex.join(["python", "-m", "benchmarks.soak", *sys.argv[1:]]),
        "server_command": shlex.join(server.argv),
        "commit": _commit(),
        "seconds": seconds,
        "workers": args.workers,
        "max_bytes": args.max_bytes,
        "disk_max_bytes": args.disk_max_bytes if args.disk else None,
        "object_bytes": OBJECT_BYTES,
        "cold_keys": settings.cold_keys,
        "slowloris_per_target_and_kind": args.slowloris,
        "server_cpu": args.server_cpu,
        "load_cpu": args.load_cpu,
        "load_before": ", ".join(f"{x:.1f}" for x in load_before),
        "load_after": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
        "sigterm_seconds": stop_seconds,
    }


def _abuse_settings(args: argparse.Namespace) -> AbuseSettings:
    return AbuseSettings(
        range_rate=args.range_rate,
        trickles=args.trickles,
        idle=args.attack_idle,
        tunnels=args.attack_tunnels,
        purge_every=args.purge_every,
    )


async def _run(
    args: argparse.Namespace,
    server: SoakServer,
    traffic: Traffic,
    tally: Tally,
    live: Live,
    began: float,
) -> None:
    """Let the traffic run, with a kill round every ``--kill-every`` minutes and one at the end."""
    rng = random.Random(args.seed)
    end = began + args.minutes * 60
    every = args.kill_every * 60 if args.kill_every > 0 else float("inf")
    next_kill = began + every
    while True:
        now = time.monotonic()
        if next_kill < end - AFTER_LAST_KILL:
            await asyncio.sleep(max(0.0, next_kill - now))
            next_kill += every
        else:
            await asyncio.sleep(max(0.0, end - AFTER_LAST_KILL - now))
        await _kill_round(server, traffic, tally, live, rng, began)
        if time.monotonic() >= end - AFTER_LAST_KILL:
            await asyncio.sleep(max(0.0, end - time.monotonic()))
            return


async def _kill_round(
    server: SoakServer, traffic: Traffic, tally: Tally, live: Live, rng: random.Random, began: float
) -> None:
    """kill -9 right after a clear's 200, restart on the same state, count lost records."""
    traffic.cleared.clear()
    try:
        await asyncio.wait_for(traffic.cleared.wait(), 10)
    except TimeoutError:
        tally.example("kill rounds", "no clear was answered 200 in 10 s before the kill")
    await asyncio.sleep(rng.uniform(0.0, 0.05))  # within the 50 ms an audit batch may wait
    killed = live.generation
    live.up = False
    live.generation += 1
    at, wall = time.monotonic() - began, time.time()
    await server.kill()
    started = time.monotonic()
    await server.start()
    restart_seconds = time.monotonic() - started
    live.up = True
    confirmed = [c for c in tally.confirmed if c.generation == killed]
    lost = audit_lost(confirmed, await asyncio.to_thread(server.audit))
    if lost:  # a replay of a journal may still be under way: look once more
        await asyncio.sleep(AUDIT_SETTLE)
        lost = audit_lost(confirmed, await asyncio.to_thread(server.audit))
    for clear in lost:
        tally.example(
            "confirmed clears without an audit record",
            f"{clear.actor} {clear.domain}: sent {wall - clear.start:.3f} s and answered 200"
            f" {wall - clear.end:.3f} s before the kill",
        )
    tally.kills.append(
        {
            "at": at,
            "confirmed": len(confirmed),
            "audit_lost": len(lost),
            "restart_seconds": restart_seconds,
        }
    )


async def _sample(server: SoakServer, tally: Tally, began: float, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    next_at = loop.time()
    while not stop.is_set():
        sample = await asyncio.to_thread(server.sample, time.monotonic() - began)
        if sample is not None:
            tally.samples.append(sample)
        next_at += 1.0
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.0, next_at - loop.time()))


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _size(text: str) -> int:
    units = {"KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(text.removesuffix(unit)) * factor
    return int(text)


def _pin(args: argparse.Namespace) -> None:
    """This process (load and origin) on the load core; fall back as benchmarks.run does."""
    allowed = sorted(os.sched_getaffinity(0))
    if int(args.load_cpu) not in allowed:
        args.load_cpu = str(allowed[0])
    if not {int(c) for c in args.server_cpu.split(",")} <= set(allowed):
        args.server_cpu = str(allowed[-1])
    os.sched_setaffinity(0, {int(args.load_cpu)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--out", type=Path, help="report directory (default: a new temporary one)")
    parser.add_argument("--workers", type=int, default=1, help="[edge] workers")
    parser.add_argument("--kill-every", type=float, default=0.0, help="minutes; 0: at the end only")
    parser.add_argument("--max-bytes", type=_size, default=32 * 1024**2, help="cache.max_bytes")
    parser.add_argument("--disk", action="store_true", help="with the shared tier (disk_path)")
    parser.add_argument(
        "--disk-max-bytes", type=_size, default=1024**3, help="cache.disk_max_bytes, with --disk"
    )
    parser.add_argument("--regenerate-every", type=float, default=10.0, help="seconds")
    parser.add_argument("--slowloris", type=int, default=8, help="per target and kind")
    parser.add_argument("--slowloris-hold", type=float, default=60.0, help="seconds")
    parser.add_argument("--slow-max", type=float, default=1.5, help="slowest origin answer, s")
    parser.add_argument("--server-cpu", default="1", help="cores for the server (taskset -c)")
    parser.add_argument("--load-cpu", default="0", help="core for this process")
    parser.add_argument("--seed", type=int, default=0)
    abuse = parser.add_argument_group("the second round's attacks (issue 24)")
    abuse.add_argument("--no-abuse", action="store_true", help="the first round's soak only")
    abuse.add_argument("--range-rate", type=float, default=50.0, help="per object, a second")
    abuse.add_argument("--trickles", type=int, default=96, help="bodies trickled at once")
    abuse.add_argument("--attack-idle", type=int, default=900, help="idle connections held")
    abuse.add_argument("--attack-tunnels", type=int, default=300, help="tunnels held")
    abuse.add_argument("--purge-every", type=float, default=0.5, help="seconds between purges")
    abuse.add_argument(
        "--h2", action="store_true", help="issue 32's HTTP/2 attacks too (benchmarks/soak_h2.py)"
    )
    args = parser.parse_args(argv)
    if args.minutes * 60 < 2 * AFTER_LAST_KILL:
        parser.error("--minutes must give at least 6 seconds")
    _pin(args)
    out = args.out or Path(tempfile.mkdtemp(prefix="cdn-proxy-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    doc = asyncio.run(soak(args, out))
    (out / "soak.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    (out / "soak.md").write_text(markdown(doc), encoding="utf-8")
    chart(doc, out / "soak.png")
    print(markdown(doc))
    print(f"report: {out}")
    return 1 if doc["stale_after_200"]["stale"] or doc["fivexx"]["unexpected"] else 0


if __name__ == "__main__":
    sys.exit(main())
