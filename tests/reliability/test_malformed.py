"""Issue 13, failure 7b: each malformed request logged a full ERROR traceback (586 bytes per
60-byte request).

Against a real ``cdn-proxy serve``: 200 malformed requests to the edge, and 200 to the API
listener, each answered 400 and closed; the log grows by a bounded number of lines with no
traceback, and /metrics counts every one of them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.conftest import Origin
from tests.polling import until
from tests.reliability.connections_support import config_text, metric, served

COUNT = 200
# Three kinds of bad input the HTTP parser rejects: a header line without a colon, a bad
# HTTP version, a header name with a space.
MALFORMED = (
    b"GET / HTTP/1.1\r\nHost: example.com\r\nno colon here\r\n\r\n",
    b"GET / HTTP/9.Z\r\nHost: example.com\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: example.com\r\nBad Name: x\r\n\r\n",
)


async def send(address: tuple[str, int], message: bytes) -> bytes:
    """One request on a connection of its own; what came back before the server closed."""
    reader, writer = await asyncio.open_connection(*address)
    writer.write(message)
    async with asyncio.timeout(5):
        answer = await reader.read()
    writer.close()
    return answer


@pytest.mark.slow
@pytest.mark.parametrize(
    ("listener", "workers"),
    [("edge", 1), ("api", 1), ("edge", 2)],
    ids=["edge", "api", "edge-two-workers"],
)
async def test_malformed_requests_are_answered_400_counted_and_logged_once(
    tmp_path: Path, origin: Origin, listener: str, workers: int
) -> None:
    async with served(tmp_path, config_text(origin.url, workers=workers)) as proxy:
        address = proxy.edge_address if listener == "edge" else proxy.api_address
        before = len(proxy.log_lines())
        for i in range(0, COUNT, 20):  # 20 at a time
            answers = await asyncio.gather(
                *(send(address, MALFORMED[j % len(MALFORMED)]) for j in range(i, i + 20))
            )
            for answer in answers:
                assert answer.split(b" ", 2)[1] == b"400", answer[:80]
        name = f'cdn_proxy_bad_requests_total{{listener="{listener}"}}'

        # With workers, each reports its figures to the node with its lease renewal: polled.
        async def counted() -> bool:
            return await metric(proxy, name) == COUNT

        await until(counted, within=5.0, every=0.05)
        grown = proxy.log_lines()[before:]
        # One summary line per process at first, and one more if the burst outlasted it.
        mine = [line for line in grown if " WARNING " in line or " ERROR " in line]
        assert 1 <= len(mine) <= 2 * workers, mine
        assert all("malformed requests" in line for line in mine)
        assert "Traceback" not in proxy.log_text()
        assert "ERROR" not in proxy.log_text()
