"""Instructions per hit, counted by callgrind: a measure that load on the machine does not move.

Run (needs valgrind: ``apt-get install valgrind``):
    .venv/bin/python -m benchmarks.instructions [--size 1024] [--requests 2000]
        [--systems cdn-proxy,floor,client-cache] [--root DIR]

Each Python system (cdn-proxy, the bare-aiohttp floor, the aiohttp-client-cache design) is
started twice under ``valgrind --tool=callgrind`` in front of the benchmark origin (which runs
normally). Both times one object is fetched to cache it; the second time ``--requests`` more
hits follow, over 8 keep-alive connections. The difference between the two totals, divided by
the number of hits, is what one hit costs in user-space instructions: the interpreter, aiohttp,
the proxy, libc, not the kernel. Runs of the same code agree to within about 2% (89,719 and
88,701 for one 1 KiB hit), so it shows a change to the hit path larger than that on a machine
too busy for throughput numbers to settle, and
its ratios between systems are stable where req/s ratios are not. It does not replace wrk:
instructions are not time (cache misses, system calls and the kernel's side of the socket
are left out), so the budgets are still judged on req/s.

``--root`` runs cdn-proxy from another checkout (``git worktree add /tmp/before HEAD``) to
compare a change with what it replaces, in the same venv.

``--tagged`` fetches an object the origin tags five times (``Surrogate-Key``), for the hit cost
of a tagged entry.
``--edge "hit_lane = false"`` adds a key to cdn-proxy's [edge] table (repeatable): the hit
lane off (decision 0050), say.
``--access-log combined|json`` runs cdn-proxy with its access log on, written to a file in
its temporary directory (decision 0019); off by default, as in the default config.

``--post`` sends POSTs with a ``--size`` byte body instead of GETs: the edge forwards each to
the origin (which answers with the object) and relays the answer, so the count is that of the
forwarded path (edge/forward.py), origin connection included.

``--rules N`` gives the benchmark's domain N cache rules (decision 0033): the first N-1 for
paths no request takes (``/nomatch-I/*``), the last for the object's (``/o/*``, an edge_ttl),
so each hit asks all N and one applies.

``--tier memory|disk`` runs cdn-proxy with its shared tier on (``[cache] disk_path``, issue 23):
``memory`` counts hits from the memory tier in front of it (the peek path, as without a disk
tier); ``disk`` makes the memory tier too small to hold the object (``max_bytes`` 4 KiB: it
keeps objects up to an eighth of that), so every hit is read from the shared tier (by the
edge's fast path since branch r27a: edge/disk_hits.py, decision 0030).

``--keep DIR`` copies each run's ``callgrind.out`` into DIR (``cdn-proxy-0.out`` and
``cdn-proxy-N.out``), for ``callgrind_annotate`` on where a hit's instructions go.

``--clears N`` counts cdn-proxy's instructions per clear-cache request instead: N requests, one
after another on one connection, each answered 200 (the audit records included, written
behind in batches).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks import load
from benchmarks.systems import (
    ROOT,
    Origin,
    Server,
    client_cache_argv,
    create_token,
    floor_argv,
    free_port,
    proxy_addresses,
    proxy_argv,
    proxy_config,
    wait_for_port,
)

HOST = "h.example"
CONNECTIONS = 8
CPU = str(min(os.sched_getaffinity(0)))  # pinning does not change a count: any core will do
START_SECONDS = 180.0  # the interpreter starts 20 to 50 times slower under callgrind


def start(
    system: str,
    out: Path,
    size: int,
    origin_port: int,
    root: Path,
    home: Path,
    access_log: str | None = None,
    rules: int = 0,
    tier: str | None = None,
    edge_keys: tuple[str, ...] = (),
) -> tuple[Server, int]:
    """The system started under callgrind (writing to ``out``), and the port it serves on."""
    callgrind = callgrind_argv(out)
    log = home / f"{out.stem}.log"
    if system == "cdn-proxy":
        config = proxy_config(home, origin_port)
        if access_log is not None:
            text = config.read_text().replace(
                "[edge]\n",
                f'[edge]\naccess_log = "access.log"\naccess_log_format = "{access_log}"\n',
                1,
            )
            config.write_text(text)
        if rules:
            config.write_text(with_rules(config.read_text(), rules))
        if edge_keys:
            lines = "".join(f"{key}\n" for key in edge_keys)
            config.write_text(config.read_text().replace("[edge]\n", f"[edge]\n{lines}", 1))
        if tier is not None:
            memory = "8GiB" if tier == "memory" else "4KiB"  # disk: no 1 KiB object fits
            text = config.read_text().replace(
                '[cache]\nmax_bytes = "8GiB"\n',
                f'[cache]\nmax_bytes = "{memory}"\ndisk_path = "cache"\ndisk_max_bytes = "1GiB"\n',
                1,
            )
            config.write_text(text)
        server = Server(system, [*callgrind, *proxy_argv(config)], log, CPU, cwd=root)
        server.start()
        return server, proxy_addresses(server, START_SECONDS)[0]
    port = free_port()
    if system == "floor":
        argv = floor_argv(port, [size])
    elif system == "client-cache":
        argv = client_cache_argv(port, origin_port, "memory", home)
    else:
        raise SystemExit(f"unknown system {system!r}")
    server = Server(system, [*callgrind, *argv], log, CPU)
    server.start()
    wait_for_port(server, port, START_SECONDS)
    return server, port


async def drive(port: int, path: str, requests: int, post: bytes | None = None) -> None:
    reply = await load.get(port, path, HOST)  # the miss that caches it
    if reply.status != 200:
        raise SystemExit(f"GET {path}: {reply.status}")
    method, body = ("GET", b"") if post is None else ("POST", post)

    async def client(count: int) -> None:
        connection = await load.Connection.open(port)
        try:
            for _ in range(count):
                connection.send(method, path, HOST, body=body)
                if (await connection.receive()).status != 200:
                    raise SystemExit(f"{method} {path} was not a 200")
        finally:
            await connection.close()

    share, extra = divmod(requests, CONNECTIONS)
    await asyncio.gather(*(client(share + (i < extra)) for i in range(CONNECTIONS)))


def instructions(
    system: str,
    size: int,
    requests: int,
    origin_port: int,
    root: Path,
    tmp: Path,
    kind: str = "o",
    access_log: str | None = None,
    post: bool = False,
    rules: int = 0,
    tier: str | None = None,
    edge_keys: tuple[str, ...] = (),
) -> int:
    home = tmp / f"{system}-{requests}"
    home.mkdir()
    out = home / "callgrind.out"
    server, port = start(
        system, out, size, origin_port, root, home, access_log, rules, tier, edge_keys
    )
    try:
        asyncio.run(drive(port, f"/{kind}/{size}/0", requests, b"x" * size if post else None))
    finally:
        server.stop()  # SIGTERM: callgrind writes its counts as the process ends
    return totals(out)


def with_rules(text: str, rules: int) -> str:
    """The config ``text`` with ``rules`` [[domains.rules]] tables under HOST's domain."""
    head = f'[[domains]]\nname = "{HOST}"\n'
    start = text.index(head)
    end = text.index("\n", start + len(head)) + 1  # its origin line
    tables = "".join(
        f'\n[[domains.rules]]\nname = "nomatch-{i}"\npaths = ["/nomatch-{i}/*"]\nedge_ttl = "1h"\n'
        for i in range(rules - 1)
    )
    tables += '\n[[domains.rules]]\nname = "objects"\npaths = ["/o/*"]\nedge_ttl = "1d"\n\n'
    return text[:end] + tables + text[end:]


def callgrind_argv(out: Path) -> list[str]:
    return ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]


def totals(out: Path) -> int:
    """The instructions callgrind counted, from the file it wrote as the process ended."""
    match = re.search(r"^totals: (\d+)", out.read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"no totals in {out}")
    return int(match.group(1))


def clear_instructions(clears: int, origin_port: int, root: Path, tmp: Path) -> int:
    """Total instructions of cdn-proxy, started under callgrind, after ``clears`` clears."""
    home = tmp / f"clears-{clears}"
    home.mkdir()
    config = proxy_config(home, origin_port)
    token = create_token(config, root)
    out = home / "callgrind.out"
    argv = [*callgrind_argv(out), *proxy_argv(config)]
    server = Server("cdn-proxy", argv, home / "log", CPU, cwd=root)
    server.start()
    headers = [("Authorization", f"Bearer {token}"), ("Content-Type", "application/json")]

    async def drive(api: int) -> None:
        connection = await load.Connection.open(api)
        try:
            for _ in range(clears):
                reply = await connection.request(
                    "POST",
                    "/api/v1/cdn/clear-cache",
                    "127.0.0.1",
                    headers,
                    b'{"domain": "a.example"}',
                )
                if reply.status != 200:
                    raise SystemExit(f"clear-cache answered {reply.status}")
        finally:
            await connection.close()

    try:
        asyncio.run(drive(proxy_addresses(server, START_SECONDS)[1]))
    finally:
        server.stop()
    return totals(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--systems", default="cdn-proxy,floor,client-cache")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout to run cdn-proxy from")
    parser.add_argument("--clears", type=int, default=0, help="count clear-cache requests")
    parser.add_argument(
        "--tagged", action="store_true", help="hits on an object the origin gave five tags"
    )
    parser.add_argument(
        "--access-log", choices=("combined", "json"), help="cdn-proxy with its access log on"
    )
    parser.add_argument(
        "--post", action="store_true", help="forwarded POSTs of a --size body instead of hits"
    )
    parser.add_argument(
        "--rules", type=int, default=0, help="N cache rules on the domain, the last matching"
    )
    parser.add_argument(
        "--tier", choices=("memory", "disk"), help="cdn-proxy with its shared tier, hits from it"
    )
    parser.add_argument(
        "--edge",
        action="append",
        default=[],
        help='an [edge] key for cdn-proxy, as TOML ("hit_lane = false"); repeatable',
    )
    parser.add_argument(
        "--keep", type=Path, help="copy each run's callgrind.out here (for callgrind_annotate)"
    )
    args = parser.parse_args()
    edge_keys = tuple(args.edge)
    if args.clears:
        with tempfile.TemporaryDirectory(prefix="cdn-proxy-ir-") as name:
            tmp = Path(name)
            origin = Origin(tmp, CPU, slow_ms=50.0)
            try:
                base = clear_instructions(0, origin.port, args.root, tmp)
                loaded = clear_instructions(args.clears, origin.port, args.root, tmp)
            finally:
                origin.stop()
        per_clear = (loaded - base) / args.clears
        print(f"cdn-proxy: {per_clear:,.0f} instructions per clear-cache request")
        print(f"({' '.join(sys.argv)}; {args.clears} clears)")
        return
    with tempfile.TemporaryDirectory(prefix="cdn-proxy-ir-") as name:
        tmp = Path(name)
        origin = Origin(tmp, CPU, slow_ms=50.0)
        try:
            results: dict[str, float] = {}
            for system in args.systems.split(","):
                root = args.root if system == "cdn-proxy" else ROOT
                kind = "tagged" if args.tagged else "o"
                log = args.access_log if system == "cdn-proxy" else None
                rules = args.rules if system == "cdn-proxy" else 0
                tier = args.tier if system == "cdn-proxy" else None
                keys = edge_keys if system == "cdn-proxy" else ()
                # The same run with no requests and with them: the difference is theirs.
                rest = (origin.port, root, tmp, kind, log, args.post, rules, tier, keys)
                base = instructions(system, args.size, 0, *rest)
                loaded = instructions(system, args.size, args.requests, *rest)
                results[system] = (loaded - base) / args.requests
                if args.keep is not None:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    for count in (0, args.requests):
                        out = tmp / f"{system}-{count}" / "callgrind.out"
                        shutil.copyfile(out, args.keep / f"{system}-{count}.out")
                what = "forwarded POST" if args.post else "hit"
                print(f"{system}: {results[system]:,.0f} instructions per {what}", flush=True)
        finally:
            origin.stop()
    if "cdn-proxy" in results:
        for system, value in results.items():
            if system != "cdn-proxy":
                print(f"cdn-proxy / {system}: {results['cdn-proxy'] / value:.2f}x instructions")
    counted = "forwarded POSTs" if args.post else "hits"
    print(f"({' '.join(sys.argv)}; {args.size} B object, {args.requests} {counted})")


if __name__ == "__main__":
    main()
