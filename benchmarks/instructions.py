"""Instructions per hit, counted by callgrind: a measure of the hit path that noise cannot move.

Run (needs valgrind: ``apt-get install valgrind``):
    .venv/bin/python -m benchmarks.instructions [--size 1024] [--requests 2000]
        [--systems cdn-proxy,floor,client-cache] [--root DIR]

Each Python system (cdn-proxy, the bare-aiohttp floor, the aiohttp-client-cache design) is
started twice under ``valgrind --tool=callgrind`` in front of the benchmark origin (which runs
normally). Both times one object is fetched to cache it; the second time ``--requests`` more
hits follow, over 8 keep-alive connections. The difference between the two totals, divided by
the number of hits, is what one hit costs in user-space instructions: the interpreter, aiohttp,
the proxy, libc, not the kernel. It is the same on every run (to within about 0.1%), so it
shows a change to the hit path on a machine too busy for throughput numbers to settle, and
its ratios between systems are stable where req/s ratios are not. It does not replace wrk:
instructions are not time (cache misses, system calls and the kernel's side of the socket
are left out), so the budgets are still judged on req/s.

``--root`` runs cdn-proxy from another checkout (``git worktree add /tmp/before HEAD``) to
compare a change with what it replaces, in the same venv.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import load
from benchmarks.systems import PYTHON, ROOT, free_port

HOST = "h.example"
CONNECTIONS = 8


def command(system: str, port: int, origin_port: int, home: Path, root: Path) -> list[str]:
    if system == "cdn-proxy":
        config = home / "proxy.toml"
        config.write_text(
            f'[edge]\nlisten = "127.0.0.1:{port}"\n\n[api]\nlisten = "127.0.0.1:{free_port()}"\n'
            '\n[cache]\nmax_bytes = "1GiB"\nmax_object_bytes = "8MiB"\n\n'
            f'[state]\npath = "{home / "state.db"}"\n\n'
            f'[[domains]]\nname = "{HOST}"\norigin = "http://127.0.0.1:{origin_port}"\n'
        )
        return [PYTHON, "-m", "proxy", "serve", "--config", str(config)]
    if system == "floor":
        return [PYTHON, "-m", "benchmarks.floor", "--port", str(port)]
    if system == "client-cache":
        return [
            PYTHON,
            "-m",
            "benchmarks.peers.client_cache_proxy",
            "--port",
            str(port),
            "--origin-port",
            str(origin_port),
            "--backend",
            "memory",
        ]
    raise SystemExit(f"unknown system {system!r}")


async def wait_for(port: int, deadline: float) -> None:
    while True:
        try:
            connection = await load.Connection.open(port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)  # polling a process that is still starting
            continue
        await connection.close()
        return


async def drive(port: int, path: str, requests: int) -> None:
    reply = await load.get(port, path, HOST)  # the miss that caches it
    if reply.status != 200:
        raise SystemExit(f"GET {path}: {reply.status}")

    async def client(count: int) -> None:
        connection = await load.Connection.open(port)
        try:
            for _ in range(count):
                connection.send("GET", path, HOST)
                if (await connection.receive()).status != 200:
                    raise SystemExit(f"GET {path} was not a 200")
        finally:
            await connection.close()

    share, extra = divmod(requests, CONNECTIONS)
    await asyncio.gather(*(client(share + (i < extra)) for i in range(CONNECTIONS)))


def instructions(
    system: str, path: str, requests: int, origin_port: int, root: Path, home: Path
) -> int:
    port = free_port()
    out = home / f"callgrind-{system}-{requests}.out"
    argv = [
        "valgrind",
        "--tool=callgrind",
        f"--callgrind-out-file={out}",
        *command(system, port, origin_port, home, root),
    ]
    env = {**os.environ, "PYTHONPATH": str(root)}
    with (home / f"{system}-{requests}.log").open("w") as log_file:
        server = subprocess.Popen(argv, cwd=root, env=env, stdout=log_file, stderr=log_file)
        try:
            asyncio.run(wait_for(port, time.monotonic() + 120))
            asyncio.run(drive(port, path, requests))
        finally:
            server.send_signal(signal.SIGINT if system != "cdn-proxy" else signal.SIGTERM)
            server.wait(timeout=120)
    match = re.search(r"^totals: (\d+)", out.read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"no totals in {out}")
    return int(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--systems", default="cdn-proxy,floor,client-cache")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout to run cdn-proxy from")
    args = parser.parse_args()
    path = f"/o/{args.size}/0"
    with tempfile.TemporaryDirectory(prefix="cdn-proxy-ir-") as tmp:
        home = Path(tmp)
        origin_port = free_port()
        origin = subprocess.Popen(
            [PYTHON, "-m", "benchmarks.origin", "--port", str(origin_port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
        )
        try:
            asyncio.run(wait_for(origin_port, time.monotonic() + 30))
            results: dict[str, float] = {}
            for system in args.systems.split(","):
                root = args.root if system == "cdn-proxy" else ROOT
                base = instructions(system, path, 0, origin_port, root, home)
                loaded = instructions(system, path, args.requests, origin_port, root, home)
                results[system] = (loaded - base) / args.requests
                print(f"{system}: {results[system]:,.0f} instructions per hit", flush=True)
        finally:
            origin.terminate()
            origin.wait()
    if "cdn-proxy" in results:
        for system, value in results.items():
            if system != "cdn-proxy":
                print(f"cdn-proxy / {system}: {results['cdn-proxy'] / value:.2f}x instructions")
    print(f"({' '.join(sys.argv)}; {args.size} B object, {args.requests} hits)")


if __name__ == "__main__":
    main()
