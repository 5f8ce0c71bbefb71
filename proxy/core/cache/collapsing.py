"""How long a collapsed request waits for its leader: while it makes progress. No I/O.

A request that misses a key another request is already fetching waits for that leader's
answer (``proxy/edge/flights.py``). The leader's own origin timeouts bound each step of its
fetch, not its total time: ``connect_timeout`` to connect, then ``read_timeout`` for any one
read (the headers, then each piece of the body). A waiter keeps the same bounds, measured on
the leader's progress rather than on its own arrival:

- until the leader has the headers: ``connect_timeout + read_timeout`` from the flight's start;
- after that: ``read_timeout`` from the leader's last progress (the headers, or body bytes).

So a healthy origin whose body trickles for minutes keeps one request for every client, and
a leader that stops moving releases its waiters within one read timeout.

Each bound carries ``LEADER_FIRST`` seconds more than the leader's own. When it is the origin
that stalls, the leader's timeout then fires first and the waiters share its error, one 504
for all, instead of each sending one more request to an origin that has stopped answering.
A waiter's own limit is for a leader held up by anything else.
"""

from __future__ import annotations

LEADER_FIRST = 0.5  # seconds


def give_up_at(
    *, started: float, progressed: float | None, connect_timeout: float, read_timeout: float
) -> float:
    """When a waiter stops waiting for a leader whose flight began at ``started`` and last
    made progress at ``progressed`` (None: no headers yet), on the same clock."""
    if progressed is None:
        return started + connect_timeout + read_timeout + LEADER_FIRST
    return progressed + read_timeout + LEADER_FIRST
