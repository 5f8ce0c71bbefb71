"""An HTTP/2 request head as the edge reads an HTTP/1.1 one (RFC 9113 §8.3): the pseudo-fields
give the method and target, ``:authority`` is the Host (§8.3.1), and the cookie crumbs a
client may send as several fields are one Cookie again (§8.2.3). h2 has checked the fields
already (names, pseudo-fields, connection fields: ``validate_inbound_headers``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from multidict import CIMultiDict


@dataclass(frozen=True, slots=True)
class Head:
    method: str
    path: str  # :path, as sent
    headers: CIMultiDict[str]
    raw: tuple[tuple[bytes, bytes], ...]  # the regular fields, as sent (Cookie joined)

    @property
    def served(self) -> bool:
        """Whether the edge answers it: not CONNECT (extended or not: decision 0036), and
        an origin-form target, or ``*``."""
        return self.method != "CONNECT" and (self.path.startswith("/") or self.path == "*")


def read_head(fields: Iterable[tuple[bytes | str, bytes | str]]) -> Head:
    pseudo: dict[bytes, bytes] = {}
    headers: CIMultiDict[str] = CIMultiDict()
    raw: list[tuple[bytes, bytes]] = []
    cookies: list[str] = []
    for name, value in fields:
        name_b = name if isinstance(name, bytes) else name.encode()
        value_b = value if isinstance(value, bytes) else value.encode()
        if name_b[:1] == b":":
            pseudo[name_b] = value_b
        elif name_b == b"cookie":
            cookies.append(value_b.decode("latin-1"))
        else:
            headers.add(name_b.decode("latin-1"), value_b.decode("latin-1"))
            raw.append((name_b, value_b))
    if cookies:
        headers["Cookie"] = "; ".join(cookies)
        raw.append((b"cookie", headers["Cookie"].encode("latin-1")))
    authority = pseudo.get(b":authority")
    if authority is not None:
        headers["Host"] = authority.decode("latin-1")
    method = pseudo.get(b":method", b"").decode("latin-1")
    path = pseudo.get(b":path", b"").decode("latin-1")
    return Head(method, path, headers, tuple(raw))
