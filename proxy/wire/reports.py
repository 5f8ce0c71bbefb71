"""A member's info: who it is and how it is, and its report, written at every sync into
``{cdn}:members`` (proxy/fleet/member.py) and read by every control plane for the Nodes page,
/metrics and the dashboard (proxy/fleet/figures.py).

Version 1 is the JSON object the builds before decision 0027 wrote (the same keys; the
report's now come first); a later version adds ``"v"``. Every key has a default, so an info
written by an older build that lacked some (``purges`` came with decision 0026, ``connections`` and
``responses`` later, ``purge_state`` with 0037, ``tier`` and ``origins`` with the tiers'
figures, ``peer_fill`` and ``advertise`` with 0047,
``answers`` and ``counters`` with 0051) is read with those at their default; keys this
build does not know are ignored. A value of the wrong type refuses the whole info: its member
is left out of the sums, as one whose info was not JSON was.

The purge script finds ``"purges":1`` in the info by a plain search (proxy/fleet/
purge_scripts.py): the encoder writes no space, and ``purges`` must stay an integer key.
"""

from __future__ import annotations

from typing import Any

import msgspec

from proxy.wire.versions import decode_json, object_version

READS = (1,)
INFO = "member-info"


class TierReport(msgspec.Struct, frozen=True, kw_only=True):
    """An edge process's view of its node's shared tier (decision 0030): what it served from
    it and its own faults (each process counts the faults of its own calls)."""

    disk_hits: int = 0  # hits answered by the shared tier (its lookups, less the collapsed)
    collapsed: int = 0  # misses answered by another worker's fill (TieredStore.collapsed)
    faults: int = 0
    corrupt: int = 0
    dropped_fills: int = 0  # write errors: fills not stored because of a fault
    not_durable: int = 0  # purges the tier could not make durable
    degraded: str | None = None  # its last fault, None while healthy
    stopped: bool = False


class ServerReport(msgspec.Struct, frozen=True, array_like=True):
    """One origin server as an edge process sees it (decision 0034, ``Upstreams.rows``). An
    array, not an object: a report lists every server of every domain, twice a second."""

    domain: str
    origin: str
    backup: bool = False
    up: bool = True
    since_seconds: float = 0.0
    last_failure: str | None = None
    last_failure_seconds_ago: float | None = None
    requests: int = 0
    errors: int = 0
    active: int = 0


class EdgeReport(msgspec.Struct, frozen=True, kw_only=True):
    """An edge process's figures since it started (proxy/fleet/figures.py ``edge_report``)."""

    # responses by domain and outcome
    counts: dict[str, dict[str, int]] = {}
    # the last hour's minutes with any hits or misses: start, hits, misses
    minutes: list[tuple[float, int, int]] = []
    # the store's entries, bytes, max_bytes and evictions
    store: tuple[int, int, int, int] = (0, 0, 0, 0)
    # listener -> ConnectionGuard.figures()
    connections: dict[str, list[int]] = {}
    # Responses.report(): summed by Responses.summed, which skips what it cannot read
    responses: dict[str, Any] = {}
    # the entries and bytes of each domain with any
    domains: dict[str, tuple[int, int]] = {}
    # the store's purge state (decision 0037): bytes, budget, forgotten, retired, cleared
    purge_state: tuple[int, int, int, int, int] = (0, 0, 0, 0, 0)
    # its shared tier's figures; None without one
    tier: TierReport | None = None
    # its origin servers, every domain's
    origins: list[ServerReport] = []
    # peer fills (decision 0047): requests sent to each owner node, and their failures by
    # peer and kind ("timeout", "unreachable", "protocol", "label")
    peer_requests: dict[str, int] = {}
    peer_errors: dict[str, dict[str, int]] = {}
    # Decision 0051: its fill budget's and compression queue's figures (AnswerCollector.
    # figures), and its origin counters: name -> domain -> kind or reason ("" for none) ->
    # count (Telemetry.edge_counters)
    answers: list[int] = []
    counters: dict[str, dict[str, dict[str, int]]] = {}
    # peers' requests it answered as the key's owner, and their bytes; the bytes it sent its
    # clients (not its peers), and read from origin servers (the origin offload)
    peer_answers: int = 0
    peer_answer_bytes: int = 0
    served_bytes: int = 0
    origin_bytes: int = 0


class MemberInfo(EdgeReport, frozen=True, kw_only=True):
    """Who a member is and how it stands (proxy/fleet/member.py), with its report."""

    node: str = ""
    worker: int = 0
    pid: int = 0
    address: str = ""
    fenced: bool = False
    applied: int = 0
    renew_failures: int = 0
    # 1: it applies purge records (decision 0026); the purge script refuses a purge while a
    # live member does not say so (a build that would ack it unapplied).
    purges: int = 0
    # Peer fills (decision 0047): whether its node takes them, and where the other nodes
    # reach its edge ("" when it takes none). Older builds wrote neither: they take none.
    peer_fill: bool = False
    advertise: str = ""


NO_INFO = MemberInfo()
_ENCODER = msgspec.json.Encoder()


def pack_member_info(info: MemberInfo) -> str:
    return _ENCODER.encode(info).decode()


def unpack_member_info(text: str | bytes) -> MemberInfo:
    """The info a member wrote; WireError if it is not one this build reads."""
    fields = decode_json(INFO, text, dict[str, Any])
    object_version(INFO, fields, READS)
    return decode_json(INFO, text, MemberInfo)
