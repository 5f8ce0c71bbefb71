"""The trace's word on peer fills (decision 0047): which node owns the traced key, and
whether it answered when asked for it.

On a fleet whose nodes take peer fills, the control plane reads the live nodes from Valkey
as the edges do (proxy/fleet/figures.py ``peer_nodes``: each with its advertise URL). The
owner is chosen by the edges' own rule (``core.peer.owner_of`` of the domain and the key's
target: the normalised key, which carries the scheme, decision 0041), then asked as a peer
asks it, with one difference that keeps the trace free of effects:
``Cache-Control: only-if-cached`` (RFC 9111 §5.2.1.7), so that it answers from its cache or
504, never fills, and never asks another peer (``CDN-Loop`` names the fleet).

An https key is asked as an asking node asks it: the request-target without the key's
scheme mark, and the scheme claimed with the fleet's peer key (``CDN-Proxy-Peer-Scheme``),
which the control plane reads from Valkey as the members do (``peer_key``). The owner
believes the scheme only with that key, so without it (no member has set it yet) the key
is not asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import aiohttp

from proxy.core.cache.keys import HTTPS_MARK, target_of
from proxy.core.peer import PeerScheme, owner_of
from proxy.wire.peer import SCHEME_HEADER, pack_scheme

ASK_TIMEOUT = 2.0  # seconds for the owner's answer head


class PeerDirectory(Protocol):
    """What the control plane reads of the fleet for the trace (proxy/fleet/figures.py)."""

    async def peer_nodes(self) -> Mapping[str, str]:
        """The live nodes that take peer fills, each with its advertise URL."""
        ...

    async def peer_key(self) -> str | None:
        """The fleet's peer key (None: not set yet, or Valkey cannot say)."""
        ...


async def owner_word(
    peers: PeerDirectory, domain: str, key_target: str, *, name: str
) -> dict[str, object] | None:
    """The trace's ``owner`` field, or None when no node takes peer fills: the owner's
    name, the nodes it was chosen among (the live ones), and ``answered``: "holds it",
    "does not hold it", "no answer: ...", "answered <status>" or "not asked: ...".
    ``name``: the fleet's cache name (CDN-Loop)."""
    nodes = await peers.peer_nodes()
    if not nodes:
        return None
    owner = owner_of(f"{domain}\0{key_target}".encode(), nodes)
    assert owner is not None
    word: dict[str, object] = {"node": owner, "among": sorted(nodes)}
    headers = {"Host": domain, "CDN-Loop": name, "Cache-Control": "only-if-cached"}
    if key_target.startswith(HTTPS_MARK):
        key = await peers.peer_key()
        if key is None:
            word["answered"] = "not asked: an https key, and the fleet has no peer key yet"
            return word
        headers[SCHEME_HEADER] = pack_scheme(PeerScheme("https", key))
    word["answered"] = await _ask(nodes[owner], target_of(key_target), headers)
    return word


async def _ask(url: str, target: str, headers: dict[str, str]) -> str:
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
