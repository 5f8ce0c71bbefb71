"""The resident memory of ``cdn-proxy serve`` under issue 24's purge flood (decision 0037).

Run: taskset -c 1 .venv/bin/python -m benchmarks.purge_flood [--rounds 100]
     [--budget 64MiB | --budget none] [--root DIR]

One process (no workers); purges ask no origin, so none runs. ``--rounds`` times, the flood of
the issue: ``POST /api/v1/cdn/purge`` of a.example with 256 distinct 4,000-character URLs
(a 1 MB body), one after another on one connection. Prints the process's RSS after one
purge and after the flood, and, when the checkout has it, the purge state /metrics reports
against its budget. ``--budget none`` writes no ``cache.purge_state_max_bytes`` (the
default applies; a checkout from before it existed rejects the key), ``--root`` runs another
checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
from pathlib import Path

import aiohttp

from benchmarks.systems import (
    ROOT,
    Server,
    create_token,
    free_port,
    proxy_addresses,
    proxy_argv,
    proxy_config,
    rss_bytes,
)

MIB = 1024 * 1024
CPU = "1"


def flood_body(round_: int) -> dict[str, object]:
    urls = []
    for i in range(256):
        head = f"/r{round_}/p{i}/"
        urls.append(head + "x" * (4000 - len(head)))
    return {"domain": "a.example", "urls": urls}


async def flood(api: int, token: str, rounds: int, pid: int) -> tuple[int, int, str]:
    """RSS after the first purge, RSS after the last, and /metrics."""
    headers = {"Authorization": f"Bearer {token}"}
    base = f"http://127.0.0.1:{api}"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as client:
        first = 0
        for round_ in range(rounds):
            async with client.post(
                base + "/api/v1/cdn/purge", json=flood_body(round_), headers=headers
            ) as response:
                if response.status != 200:
                    raise SystemExit(f"purge answered {response.status}: {await response.text()}")
            if round_ == 0:
                first = rss_bytes(pid)
        async with client.get(base + "/metrics") as response:
            return first, rss_bytes(pid), await response.text()


def figure(metrics: str, name: str) -> str:
    match = re.search(rf"^cdn_proxy_{name} (\S+)$", metrics, re.MULTILINE)
    return "-" if match is None else f"{float(match.group(1)) / MIB:.1f} MiB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--budget", default="64MiB", help='a size, or "none" to write no key')
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout to run cdn-proxy from")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = proxy_config(Path(tmp), free_port())
        if args.budget != "none":
            text = config.read_text().replace(
                "[cache]\n", f'[cache]\npurge_state_max_bytes = "{args.budget}"\n'
            )
            config.write_text(text)
        token = create_token(config, args.root)
        server = Server("cdn-proxy", proxy_argv(config), Path(tmp) / "log", CPU, args.root)
        server.start()
        try:
            api = proxy_addresses(server)[1]
            first, last, metrics = asyncio.run(flood(api, token, args.rounds, server.pid))
        finally:
            server.stop()
    print(
        f"RSS after 1 purge {first / MIB:.0f} MiB, after {args.rounds}: {last / MIB:.0f} MiB "
        f"(+{(last - first) / MIB:.0f} MiB); purge state "
        f"{figure(metrics, 'purge_state_bytes')} of {figure(metrics, 'purge_state_max_bytes')}"
    )


if __name__ == "__main__":
    main()
