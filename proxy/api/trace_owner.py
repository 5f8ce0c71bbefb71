"""The trace's word on peer fills (decision 0047): which node owns the traced key, and
whether it answered when asked for it.

On a fleet whose nodes take peer fills, the control plane reads the live nodes from Valkey
as the edges do (proxy/fleet/figures.py ``peer_nodes``: each with its advertise URL). The
owner is chosen by the edges' own rule (``core.peer.owner_of`` of the domain and the key's
target), then asked as a peer asks it, with one difference that keeps the trace free of
effects:
``Cache-Control: only-if-cached`` (RFC 9111 §5.2.1.7), so that it answers from its cache or
504, never fills, and never asks another peer (``CDN-Loop`` names the fleet). An https key
is not asked: the owner believes a scheme only with the fleet's peer key, which the control
plane does not hold.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import aiohttp

from proxy.core.peer import owner_of

ASK_TIMEOUT = 2.0  # seconds for the owner's answer head

PeerNodes = Callable[[], Awaitable[Mapping[str, str]]]


async def owner_word(
    nodes: Mapping[str, str], domain: str, key_target: str, *, name: str
) -> dict[str, object] | None:
    """The trace's ``owner`` field, or None when no node takes peer fills: the owner's
    name, the nodes it was chosen among (``nodes``: the live ones, with their advertise
    URLs), and ``answered``: "holds it", "does not hold it", "no answer: ..." or "not
    asked: ...". ``name``: the fleet's cache name (CDN-Loop)."""
    if not nodes:
        return None
    owner = owner_of(f"{domain}\0{key_target}".encode(), nodes)
    assert owner is not None
    word: dict[str, object] = {"node": owner, "among": sorted(nodes)}
    if key_target.startswith("https:"):
        word["answered"] = "not asked: an https key (its scheme is believed only from a peer)"
        return word
    word["answered"] = await _ask(nodes[owner], domain, key_target, name=name)
    return word


async def _ask(url: str, domain: str, target: str, *, name: str) -> str:
    headers = {"Host": domain, "CDN-Loop": name, "Cache-Control": "only-if-cached"}
    timeout = aiohttp.ClientTimeout(total=ASK_TIMEOUT)
    try:
        async with (
            aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session,
            session.get(url + target, headers=headers, allow_redirects=False) as response,
        ):
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"no answer: {type(exc).__name__}"
    except ValueError:
        return "not asked: the target cannot be sent"
    if status in (200, 206, 304):
        return "holds it"
    if status == 504:
        return "does not hold it"
    return f"answered {status}"
