"""Hit throughput over TLS against plain HTTP, from one cdn-proxy in the same run.

Run: .venv/bin/python -m benchmarks.tls [--runs 5] [--duration 5] [--size 1024]

One ``cdn-proxy serve`` (pinned to ``--server-cpu``) listens on both ``edge.listen`` and
``edge.tls_listen``, with a trustme certificate made for the run; the benchmark origin serves
one cacheable object of ``--size`` bytes. After a warm-up on each listener, wrk (``-t1 -c32``,
keep-alive, pinned to ``--load-cpu``) asks for the object over plain HTTP and over TLS in
turn, ``--runs`` times each, alternating which goes first. It prints the median requests per
second of each, their ratio, the median of each run's own ratio, and every command.
Keep-alive connections: what is measured is the cost of encrypting the hits (wrk opens its
32 connections once), not of handshakes.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import tempfile
import time
from pathlib import Path

import trustme

from benchmarks import wrk
from benchmarks.systems import DOMAINS, PYTHON, Origin, Server, proxy_config

HOST = DOMAINS[0]


def tls_config(home: Path, origin_port: int) -> Path:
    """The benchmarks' cdn-proxy config, with tls_listen and a default certificate."""
    ca = trustme.CA()
    leaf = ca.issue_cert(*DOMAINS)
    leaf.private_key_and_cert_chain_pem.write_to_path(str(home / "edge.pem"))
    config = proxy_config(home, origin_port)
    text = config.read_text().replace(
        '[edge]\nlisten = "127.0.0.1:0"\n',
        '[edge]\nlisten = "127.0.0.1:0"\ntls_listen = "127.0.0.1:0"\n'
        'tls_cert = "edge.pem"\ntls_key = "edge.pem"\n',
        1,
    )
    config.write_text(text)
    return config


def listening(server: Server, timeout: float = 30.0) -> dict[str, str]:
    """The address lines (edge, api, edge-tls) the server printed to its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        server.check_alive()
        found = {}
        for line in server.log.read_text(errors="replace").splitlines():
            word, _, url = line.partition(" ")
            if word in ("edge", "api", "edge-tls"):
                found[word] = url
        if len(found) == 3:
            return found
        time.sleep(0.05)
    raise RuntimeError("cdn-proxy did not print its edge, api and edge-tls addresses")


def wrk_command(url: str, path: str, seconds: int, cpu: str) -> list[str]:
    """wrk's usual command (benchmarks/wrk.py) on ``url`` (http:// or https://)."""
    argv = wrk.command(0, path, HOST, seconds, cpu=cpu)
    argv[-1] = url + path
    return argv


async def measure(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="tls-bench-") as name:
        home = Path(name)
        origin = Origin(home, args.load_cpu, slow_ms=50)
        server = Server(
            "cdn-proxy",
            [PYTHON, "-m", "proxy", "serve", "--config", str(tls_config(home, origin.port))],
            home / "proxy.log",
            args.server_cpu,
        )
        try:
            server.start()
            urls = listening(server)
            path = f"/o/{args.size}/tls-bench"
            commands = {"http": urls["edge"], "https": urls["edge-tls"]}
            for url in commands.values():  # the fill, then a warm-up on each listener
                await wrk.run(wrk_command(url, path, 1, args.load_cpu))
            rps: dict[str, list[float]] = {"http": [], "https": []}
            for run in range(args.runs):
                order = ("http", "https") if run % 2 == 0 else ("https", "http")
                for scheme in order:
                    argv = wrk_command(commands[scheme], path, args.duration, args.load_cpu)
                    result = await wrk.run(argv)
                    if result.non_2xx or result.socket_errors:
                        raise RuntimeError(f"{scheme}: {result.non_2xx} non-2xx, errors")
                    rps[scheme].append(result.rps)
            fetched = await origin.count()
        finally:
            server.stop()
            origin.stop()
    plain, tls = statistics.median(rps["http"]), statistics.median(rps["https"])
    print(f"hits of {args.size} B, {args.runs} runs of {args.duration} s each, wrk -t1 -c32")
    print(f"plain HTTP: median {plain:,.0f} req/s  (runs: {_runs(rps['http'])})")
    print(f"TLS:        median {tls:,.0f} req/s  (runs: {_runs(rps['https'])})")
    # Each run's two measurements are back to back: their ratio is the steadier figure on a
    # machine whose load drifts between runs.
    pairs = [t / p for t, p in zip(rps["https"], rps["http"], strict=True)]
    print(f"TLS / plain: {tls / plain:.2f} (medians); median of each run's ratio:", end=" ")
    print(f"{statistics.median(pairs):.2f} ({', '.join(f'{r:.2f}' for r in pairs)})")
    print(f"origin fetches: {fetched} (the fill; every other request was a hit)")
    print("commands:")
    print("  " + server.command)
    for scheme in ("http", "https"):
        print("  " + shlex.join(wrk_command(commands[scheme], path, args.duration, args.load_cpu)))


def _runs(values: list[float]) -> str:
    return ", ".join(f"{v:,.0f}" for v in values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--size", type=int, default=1024, help="bytes of the cached object")
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--load-cpu", default="0")
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
