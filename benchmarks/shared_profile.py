"""Where a hit from the shared tier spends its time: py-spy on cdn-proxy serving one object
from its disk tier under wrk (issue 23: the 1 MiB hits of benchmarks/shared_hits.py).

Run: .venv/bin/python -m benchmarks.shared_profile [--size 1048576] [--duration 6] [--top 12]

cdn-proxy is set up as in shared_hits.py (``disk_path``, a memory tier too small to keep the
object, so every hit is read from the shared tier), wrk asks for the object on the load core,
and ``py-spy record --native`` samples every thread of the process (needs ptrace rights).
Samples of threads waiting for work (the thread pool's queue, the event loop's
``epoll_wait``) are dropped, so the shares are of the time the process was busy; a thread
waiting for the GIL still counts where it waits (``--gil``: only the thread holding it).
Printed: the busiest functions by self time, and the share of a few frames of the answer
path (the frame and everything it called).
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks import load, wrk
from benchmarks.disk_peers import HOST, start_origin, start_ours
from benchmarks.profile_hit import parse_collapsed, py_spy

IDLE = ("SimpleQueue_get", "epoll_pwait", "epoll_wait")
FRAMES = {
    "socket write of the answer (aiohttp write_eof)": "StreamResponse.write_eof",
    "two-tier lookup (TieredStore.lookup)": "TieredStore.lookup",
    "shared tier lookup (SharedTier.lookup)": "SharedTier.lookup",
    "body read and checked (SharedTier.read_all)": "SharedTier.read_all",
    "the edge's handler (Edge.handle)": "Edge.handle",
}


def busy(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not any(w in line for w in IDLE))


def shares(total: Counter[str], samples: int) -> dict[str, float]:
    found: dict[str, float] = {}
    for label, name in FRAMES.items():
        count = sum(c for frame, c in total.items() if frame.startswith(name + " "))
        found[label] = 100 * count / samples
    return found


async def profile(args: argparse.Namespace, home: Path) -> None:
    origin, origin_port = start_origin(home, args.load_cpu)
    ours = None
    try:
        ours = start_ours(
            home / "cdn-proxy",
            origin_port,
            args.server_cpu,
            memory_bytes=max(64 << 10, args.size * 4),
            disk_bytes=1 << 30,
            max_object=16 << 20,
        )
        path = f"/o/{args.size}/profiled"
        for _ in range(2):
            reply = await load.get(ours.port, path, HOST)
        if 'detail="disk"' not in reply.headers.get("cache-status", ""):
            raise SystemExit(f"not a disk hit: {reply.headers.get('cache-status')!r}")
        wrk_argv = wrk.command(ours.port, path, HOST, args.duration + 2, 32, args.load_cpu)
        out = home / "profile.txt"
        spy_argv = ["taskset", "-c", args.load_cpu, py_spy(), "record", "--pid", str(ours.hit_pid)]
        spy_argv += ["--duration", str(args.duration), "--rate", "200", "--native"]
        spy_argv += ["--format", "raw", "--nolineno", "--output", str(out)]
        if args.gil:
            spy_argv.append("--gil")
        running = asyncio.create_task(wrk.run(wrk_argv))
        await asyncio.sleep(1.0)  # wrk's connections up: sample the steady state
        spy = await asyncio.create_subprocess_exec(
            *spy_argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        said, _ = await spy.communicate()
        result = await running
        if spy.returncode != 0 or not out.exists():
            raise SystemExit(f"py-spy failed:\n{said.decode(errors='replace')}")
        self_time, total, samples = parse_collapsed(busy(out.read_text()))
        print(f"{args.size:,}-byte hits from the shared tier: {result.rps:,.0f} req/s under py-spy")
        print(f"{samples:,} busy samples; the answer path, with what each frame called:")
        for label, share in shares(total, samples).items():
            print(f"  {share:5.1f}%  {label}")
        print("busiest by self time:")
        for frame, count in self_time.most_common(args.top):
            print(f"  {100 * count / samples:5.1f}%  {frame}")
        print("\ncommands:")
        for argv in (ours.server.command, shlex.join(wrk_argv), shlex.join(spy_argv)):
            print(argv)
    finally:
        if ours is not None:
            ours.stop()
        origin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--duration", type=int, default=6, help="seconds sampled")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument(
        "--gil", action="store_true", help="only samples of the thread holding the GIL"
    )
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--load-cpu", default="0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shared-profile-") as tmp:
        asyncio.run(profile(args, Path(tmp)))


if __name__ == "__main__":
    main()
