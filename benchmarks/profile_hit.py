"""Profile cdn-proxy's hit path with py-spy while wrk drives hits, and print where time goes.

Run (py-spy needs ptrace rights on the proxy: root, or CAP_SYS_PTRACE):
    .venv/bin/python -m benchmarks.profile_hit [--size 1024] [--duration 10] [--top 15]
        [--native] [--out DIR]

The origin and cdn-proxy are started as the runner starts them (proxy on the server core),
one object is cached, then ``wrk -t1 -c32`` loads it from the load core while
``py-spy record --format raw --nolineno`` samples the proxy. The collapsed stacks are written
to OUT/profile-hit-<time>.txt (load them into https://www.speedscope.app or flamegraph.pl);
the top functions by self time (the leaf of each sample) and by total time (any frame of the
sample, leaving out the frames every sample shares) are printed. py-spy runs with ``--gil``:
only samples of the thread holding the GIL count, so the shares are of the interpreter's busy
time, and the idle SQLite worker thread and the event loop's wait in epoll drop out.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import shutil
import sys
import tempfile
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import uvloop

from benchmarks import load, wrk
from benchmarks.run import choose_cpus
from benchmarks.systems import ROOT, Origin, Ours, Setting

HOST = "h.example"


def parse_collapsed(text: str) -> tuple[Counter[str], Counter[str], int]:
    """Self and total sample counts per frame, and the number of samples."""
    self_time: Counter[str] = Counter()
    total_time: Counter[str] = Counter()
    samples = 0
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        samples += count
        self_time[frames[-1]] += count
        for frame in set(frames):
            total_time[frame] += count
    return self_time, total_time, samples


def table(title: str, counts: Counter[str], samples: int, top: int) -> list[str]:
    lines = [title, "", "| # | share | samples | function (file) |", "|---:|---:|---:|---|"]
    shown = [(frame, count) for frame, count in counts.most_common() if count < samples]
    for rank, (frame, count) in enumerate(shown[:top], 1):
        lines.append(f"| {rank} | {100 * count / samples:.1f}% | {count} | `{frame}` |")
    return lines


def py_spy() -> str:
    here = Path(sys.executable).parent / "py-spy"
    found = str(here) if here.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("py-spy is not installed (pip install -e '.[bench]')")
    return found


async def profile(args: argparse.Namespace, tmp: Path) -> tuple[str, list[str]]:
    origin = Origin(tmp, args.load_cpu, 50.0)
    ours: Ours | None = None
    try:
        ours = Ours(Setting(tmp, origin.port, args.server_cpu, [args.size]))
        path = f"/o/{args.size}/0"
        for _ in range(2):
            await load.get(ours.port, path, HOST)
        wrk_argv = wrk.command(
            ours.port, path, HOST, args.duration + 2, args.connections, cpu=args.load_cpu
        )
        output = tmp / "profile.txt"
        spy_argv = [
            "taskset",
            "-c",
            args.load_cpu,
            py_spy(),
            "record",
            "--pid",
            str(ours.cache_pid()),
        ]
        spy_argv += ["--duration", str(args.duration), "--rate", str(args.rate)]
        spy_argv += ["--format", "raw", "--nolineno", "--gil", "--output", str(output)]
        if args.native:
            spy_argv.append("--native")
        load_task = asyncio.create_task(wrk.run(wrk_argv))
        await asyncio.sleep(1.0)  # connections up, steady state
        spy = await asyncio.create_subprocess_exec(
            *spy_argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        spy_out, _ = await spy.communicate()
        result = await load_task
        if spy.returncode != 0 or not output.exists():
            raise SystemExit(f"py-spy failed:\n{spy_out.decode(errors='replace')}")
        header = [
            f"cdn-proxy hit path, {args.size} B object: {result.rps:,.0f} req/s under py-spy "
            f"(p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms)",
            "",
            "```sh",
            ours.command,
            shlex.join(wrk_argv),
            shlex.join(spy_argv),
            "```",
            "",
        ]
        return output.read_text(), header
    finally:
        if ours is not None:
            ours.stop()
        origin.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_hit",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--size", type=int, default=1024, help="object size in bytes")
    parser.add_argument("--duration", type=int, default=10, help="seconds sampled")
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--native", action="store_true", help="include C/Cython frames")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "raw")
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--load-cpu", default="0")
    args = parser.parse_args(argv)
    if wrk.wrk_binary() is None:
        print("profile_hit: wrk is required (apt-get install wrk)", file=sys.stderr)
        return 2
    choose_cpus(args)
    with tempfile.TemporaryDirectory(prefix="cdn-proxy-profile-") as tmp_name:
        tmp = Path(tmp_name)
        tmp.chmod(0o755)
        collapsed, header = uvloop.run(profile(args, tmp))
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    saved = args.out / f"profile-hit-{stamp}.txt"
    saved.write_text(collapsed)
    self_time, total_time, samples = parse_collapsed(collapsed)
    if not samples:
        print("py-spy recorded no samples", file=sys.stderr)
        return 1
    lines = [*header, f"{samples} samples; collapsed stacks in {saved}", ""]
    lines += table("Top functions by self time", self_time, samples, args.top)
    lines += [""]
    lines += table("Top functions by total time", total_time, samples, args.top)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
