"""A connection's streams take turns with other connections (decision 0057): 128 requests
that arrive in one read start ``START_PER_TURN`` per turn of the event loop, and between two
turns the loop reads and answers other connections, so they are not held behind all 128
(the HTTP/2 soak's zero-window client made every other client wait about 30 ms each time it
opened a connection again).

Against a real edge in this process's loop: the burst's answers go out over many turns (a
client in the same loop reads them in many pieces, where before they went out in one write),
every one of them, and a request on another connection is answered meanwhile.
"""

from __future__ import annotations

from pathlib import Path

from proxy.edge.h2.connection import START_PER_TURN
from proxy.process.service import running
from tests.conftest import Origin, make_config
from tests.edge.h2_support import RawH2

ONLY_IF_CACHED = [("cache-control", "only-if-cached")]  # the edge's own 504: no origin
BURST = 128


async def test_a_burst_of_streams_is_started_a_few_per_turn(tmp_path: Path, origin: Origin) -> None:
    edge = {"listen": "127.0.0.1:0", "h2c": True}
    config = make_config(tmp_path, origin.url, edge=edge)
    async with running(config) as service:
        burst, other = await RawH2.open(service.edge_url), await RawH2.open(service.edge_url)
        try:
            await burst.read_events()  # the edge's SETTINGS: 128 streams allowed
            # Written before the loop turns: the edge reads all 128 at once.
            streams = [burst.request(f"/burst?n={n}", headers=ONLY_IF_CACHED) for n in range(BURST)]
            mine = other.request("/other", headers=ONLY_IF_CACHED)
            per_read = []  # streams ended by each read of the burst's answers
            while not all(burst.answers[s].ended for s in streams):
                before = sum(burst.answers[s].ended for s in streams)
                await burst.read_events(10)
                per_read.append(sum(burst.answers[s].ended for s in streams) - before)
            assert (await other.answer(mine, wait=10)).status == 504
        finally:
            await burst.close()
            await other.close()
    assert [burst.answers[s].status for s in streams] == [504] * BURST
    assert START_PER_TURN == 16
    # Before: one turn started all 128, and their answers came in one or two reads ([128],
    # [70, 58]); now a turn starts 16, and the first read gets what the first turn or two
    # wrote ([16, 32, 64, 16] here: the client, in the same loop, lags behind later turns).
    assert per_read[0] <= 2 * START_PER_TURN and len(per_read) >= 3, per_read
