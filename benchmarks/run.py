"""The benchmark runner of issue 4: cdn-proxy beside the bare-aiohttp floor, the
aiohttp-client-cache design, nginx and Varnish, in five scenarios.

Run:
    .venv/bin/python -m benchmarks.run                    # the full run, several minutes
    .venv/bin/python -m benchmarks.run --smoke            # every path, tiny sizes, seconds
    .venv/bin/python -m benchmarks.run --scenarios hit,memory --runs 5

Scenarios: hit (1), clear (2), during (3), memory (4), origin (5), machine (6); numbers work
too. machine: hits with every core for the servers and wrk -t2 on the same cores, for
cdn-proxy with [edge] workers = 2, one-process cdn-proxy, nginx worker_processes 2 and Varnish.
--before DIR adds cdn-proxy run from another checkout to the hit scenario (a same-run ratio).
Writes OUT/latest.md, OUT/latest.png and OUT/raw/<time>.json. OUT is benchmarks/results for a
full run; a smoke run writes to a fresh temporary directory unless --out is given, so it never
touches the tracked results.

The runner pins itself to the load core; every server it starts is pinned to the server core,
in its own process group, configured in a temporary directory and listening on 127.0.0.1; all
of them are stopped when the run ends, whichever way it ends. A peer that is not installed is
skipped with a note; wrk is required.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import uvloop

from benchmarks import report, scenarios, wrk
from benchmarks.scenarios import Context, Profile
from benchmarks.systems import (
    ALL_SYSTEMS,
    CACHES,
    EXTRA_SYSTEMS,
    ROOT,
    Fleet,
    Origin,
    Ours,
    Setting,
    System,
    find_binary,
    missing_reason,
)

SCENARIOS = {"1": "hit", "2": "clear", "3": "during", "4": "memory", "5": "origin", "6": "machine"}
# Scenario 6, on every core; cdn-proxy-2w first: its req/s is what the ratios divide.
MACHINE_SYSTEMS = ("cdn-proxy-2w", "cdn-proxy", "nginx-2w", "varnish")
RESULTS = ROOT / "benchmarks" / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    parser.add_argument(
        "--scenarios", default="hit,clear,during,memory,origin,machine", help="comma-separated"
    )
    parser.add_argument("--systems", default=",".join(ALL_SYSTEMS), help="comma-separated")
    parser.add_argument(
        "--runs", type=int, help="runs of the hit, during-clears and origin scenarios (full: 5)"
    )
    parser.add_argument("--clear-runs", type=int, help="fills and clears per size (full: 3)")
    parser.add_argument(
        "--during-fill", type=int, help="entries in the cleared domain before each run (10000)"
    )
    parser.add_argument("--duration", type=int, help="seconds per wrk run (full: 5)")
    parser.add_argument("--out", type=Path, help="output directory")
    parser.add_argument("--server-cpu", default="1", help="core for the servers under test")
    parser.add_argument("--load-cpu", default="0", help="core for wrk, the runner, the origin")
    parser.add_argument(
        "--machine-cpus", help="cores for scenario 6's servers and wrk (default: every core)"
    )
    parser.add_argument(
        "--before", type=Path, help="checkout to run cdn-proxy-before from (hit scenario)"
    )
    parser.add_argument(
        "--from-raw", type=Path, help="only re-render latest.md/png from a raw JSON file"
    )
    args = parser.parse_args(argv)
    names = []
    for item in args.scenarios.split(","):
        item = item.strip()
        name = SCENARIOS.get(item, item)
        if name not in SCENARIOS.values():
            parser.error(f"unknown scenario {item!r} (one of {', '.join(SCENARIOS.values())})")
        names.append(name)
    args.scenario_names = names
    args.system_names = [s.strip() for s in args.systems.split(",") if s.strip()]
    if args.before is not None and "cdn-proxy-before" not in args.system_names:
        args.system_names.append("cdn-proxy-before")
    for name in args.system_names:
        if name not in ALL_SYSTEMS + EXTRA_SYSTEMS:
            known = ", ".join(ALL_SYSTEMS + EXTRA_SYSTEMS)
            parser.error(f"unknown system {name!r} (one of {known})")
    if "cdn-proxy-before" in args.system_names and args.before is None:
        parser.error("cdn-proxy-before needs --before DIR")
    if "cdn-proxy" not in args.system_names:
        parser.error("the systems must include cdn-proxy")
    return args


def profile_for(args: argparse.Namespace) -> Profile:
    profile = scenarios.SMOKE if args.smoke else scenarios.FULL
    changes: dict[str, Any] = {}
    if args.runs:
        changes.update(runs=args.runs, burst_runs=args.runs)
    if args.clear_runs:
        changes["clear_runs"] = args.clear_runs
    if args.during_fill is not None:
        changes["during_fill"] = args.during_fill
    if args.duration:
        changes["duration"] = args.duration
    return dataclasses.replace(profile, **changes) if changes else profile


def first_line(argv: list[str]) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    text = (out.stdout + out.stderr).strip().splitlines()
    return text[0] if text else ""


def machine(server_cpu: str, load_cpu: str) -> dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    models = [
        line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line
    ]
    memory = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal")
        ),
        "?",
    )
    import aiohttp

    software = [f"Python {platform.python_version()}", f"aiohttp {aiohttp.__version__}"]
    for argv in (["nginx", "-v"], ["varnishd", "-V"], ["wrk", "-v"]):
        binary = find_binary(argv[0])
        if binary:
            software.append(first_line([binary, *argv[1:]]))
    return {
        "cpu": models[0] if models else platform.processor(),
        "cores": len(models) or os.cpu_count(),
        "uname": " ".join(platform.uname()),
        "memory": memory,
        "software": ", ".join(s for s in software if s),
        "loadavg_start": loadavg(),
        "server_cpu": server_cpu,
        "load_cpu": load_cpu,
    }


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


_T0 = time.monotonic()


def log(line: str) -> None:
    print(f"[{time.monotonic() - _T0:6.1f} s] {line}", flush=True)


async def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    profile = profile_for(args)
    results: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "benchmarks.run", *sys.argv[1:]]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "profile": dataclasses.asdict(profile),
        "machine": machine(args.server_cpu, args.load_cpu),
        "systems": {},
        "skipped_systems": {},
        "notes": [],
        "code": code_state(),
    }
    wanted = []
    for name in args.system_names:
        reason = missing_reason(name)
        if reason:
            log(f"note: skipping {name}: {reason}")
            results["skipped_systems"][name] = reason
        else:
            wanted.append(name)
    started = time.monotonic()
    origin = Origin(tmp, args.load_cpu, profile.slow_ms)
    results["origin_command"] = origin.server.command
    setting = Setting(
        tmp, origin.port, args.server_cpu, list(profile.hit_sizes), before_root=args.before
    )
    ctx = Context(
        profile=profile, origin=origin, load_cpu=args.load_cpu, server_cpu=args.server_cpu, log=log
    )
    fleets: list[Fleet] = []

    def remember(fleet: Fleet) -> None:
        for name, system in fleet.systems.items():
            results["systems"].setdefault(name, {"command": system.command, "notes": system.notes})

    try:
        chosen = args.scenario_names
        shared = [s for s in ("hit", "origin", "during", "clear") if s in chosen]
        if shared:
            names = [n for n in wanted if n in ALL_SYSTEMS and (n != "floor" or "hit" in chosen)]
            if "hit" in chosen and "cdn-proxy-before" in wanted:
                names.append("cdn-proxy-before")
            log(f"starting {', '.join(names)}")
            fleet = Fleet(setting, names)
            fleets.append(fleet)
            remember(fleet)
            systems = list(fleet.systems.values())
            caches = [s for s in systems if s.name in CACHES]
            ours = fleet.systems["cdn-proxy"]
            assert isinstance(ours, Ours)
            if "hit" in chosen:
                log("1. hit throughput and latency")
                results["hits"] = await scenarios.hits(ctx, systems)
            if "origin" in chosen:
                log("5. origin protection after a clear")
                results["origin"] = await scenarios.origin_protection(ctx, caches)
            if "during" in chosen:
                log("3. hits on b.example while a.example is cleared")
                results["during"] = await scenarios.during_clears(ctx, ours)
            if "clear" in chosen:
                log("2. clearing a domain")
                results["clear_inproc"] = scenarios.clear_in_process(ctx)
                results["clear_http"] = await scenarios.clear_over_http(ctx, caches)
            fleet.stop()
        if "memory" in chosen:
            names = [n for n in wanted if n in CACHES]
            log(f"4. memory per cached object (fresh {', '.join(names)})")
            fleet = Fleet(setting_for_memory(setting, tmp), names)
            fleets.append(fleet)
            remember(fleet)
            caches_fresh: list[System] = list(fleet.systems.values())
            results["memory"] = await scenarios.memory(ctx, caches_fresh)
            fleet.stop()
        if "machine" in chosen:
            cpus = args.machine_cpus
            results["machine_hits"] = await machine_hits(ctx, setting, cpus, tmp, fleets)
    finally:
        for fleet in fleets:
            fleet.stop()
        origin.stop()
    results["elapsed_s"] = time.monotonic() - started
    results["machine"]["loadavg_end"] = loadavg()
    if results["skipped_systems"]:
        results["notes"].append(
            "Skipped systems: "
            + "; ".join(f"{k}: {v}" for k, v in results["skipped_systems"].items())
        )
    return results


async def machine_hits(
    ctx: Context, setting: Setting, cpus: str, tmp: Path, fleets: list[Fleet]
) -> dict[str, Any]:
    """Scenario 6: the two-worker cdn-proxy, one-process cdn-proxy, nginx with two workers and
    Varnish, each given the cores ``cpus``, with wrk -t2 on the same cores."""
    names = [n for n in MACHINE_SYSTEMS if missing_reason(n) is None]
    log(f"6. whole-machine hits on cores {cpus} ({', '.join(names)})")
    home = tmp / "machine"
    home.mkdir()
    home.chmod(0o755)
    fleet = Fleet(dataclasses.replace(setting, tmp=home, server_cpu=cpus), names)
    fleets.append(fleet)
    systems = list(fleet.systems.values())
    data = await scenarios.hits(dataclasses.replace(ctx, server_cpu=cpus), systems, machine=True)
    data["cpus"] = cpus
    data["systems"] = {s.name: {"command": s.command, "notes": s.notes} for s in systems}
    data["skipped"] = [n for n in MACHINE_SYSTEMS if n not in names]
    fleet.stop()
    return data


def setting_for_memory(setting: Setting, tmp: Path) -> Setting:
    """A fresh directory for the memory fleet's configs and caches."""
    home = tmp / "memory"
    home.mkdir()
    home.chmod(0o755)
    return dataclasses.replace(setting, tmp=home)


def write(results: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    raw = out / "raw"
    raw.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    (raw / f"{stamp}-{results['profile']['name']}.json").write_text(
        json.dumps(results, indent=1, default=str)
    )
    return render(results, out)


def render(results: dict[str, Any], out: Path) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    png = out / "latest.png"
    report.chart(results, png)
    md = out / "latest.md"
    md.write_text(report.markdown(results, png.name if png.exists() else None))
    return md, png


def code_state() -> dict[str, Any]:
    """The commit measured, and how many files under proxy/ differed from it (read-only git)."""

    def git(*argv: str) -> str:
        try:
            out = subprocess.run(["git", *argv], capture_output=True, text=True, cwd=ROOT)
        except OSError:
            return ""
        return out.stdout.strip()

    changed = [line for line in git("status", "--porcelain", "--", "proxy").splitlines() if line]
    return {"commit": git("rev-parse", "--short", "HEAD"), "proxy_files_changed": len(changed)}


def choose_cpus(args: argparse.Namespace) -> None:
    """Keep the asked-for cores if this process may use them, else the first and last it may;
    then pin the runner to the load core."""
    allowed = sorted(os.sched_getaffinity(0))
    if int(args.load_cpu) not in allowed or int(args.server_cpu) not in allowed:
        args.load_cpu, args.server_cpu = str(allowed[0]), str(allowed[-1])
        print(f"note: using core {args.load_cpu} for load, {args.server_cpu} for servers")
    if args.load_cpu == args.server_cpu:
        print("note: one core only: servers and load share it", flush=True)
    if getattr(args, "machine_cpus", None) is None:  # profile_hit's arguments have none
        args.machine_cpus = ",".join(str(cpu) for cpu in allowed)
    os.sched_setaffinity(0, {int(args.load_cpu)})


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_raw:
        results = json.loads(args.from_raw.read_text())
        md, png = render(results, args.out or RESULTS)
        print(f"wrote {md} and {png}")
        return 0
    if wrk.wrk_binary() is None:
        print("benchmarks.run: wrk is required (apt-get install wrk)", file=sys.stderr)
        return 2
    choose_cpus(args)
    out = args.out
    if out is None:
        out = Path(tempfile.mkdtemp(prefix="cdn-proxy-bench-")) if args.smoke else RESULTS
    with tempfile.TemporaryDirectory(prefix="cdn-proxy-bench-run-") as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)
        results = uvloop.run(run(args, tmp))
    md, png = write(results, out)
    print(f"wrote {md} and {png}")
    for name, value, ok in report.budgets(results):
        mark = "n/a" if ok is None else ("PASS" if ok else "MISS")
        print(f"  {mark:4}  {name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
