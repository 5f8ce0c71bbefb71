"""Ports for the servers a benchmark or a test starts on loopback, chosen before they bind.

The kernel hands out a port for port 0 from the ephemeral range, the range every outgoing
connection on the machine also takes its local port from. Between the choice and the
server's own bind, a client connection may take that port, and the server then stops with
"cannot listen ... Address already in use". So ports are drawn at random below that range,
where no outgoing connection goes, and kept only if a bind shows them free.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST = 10_000  # below: ports that well-known and registered services tend to use
TRIES = 200


def ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (Linux's default when unreadable)."""
    try:
        return int(EPHEMERAL_RANGE.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port(host: str = "127.0.0.1") -> int:
    """A port no socket holds on ``host`` now, outside the ephemeral range when it leaves
    room below it (else whatever the kernel picks)."""
    top = ephemeral_low() - 1
    draw = random.SystemRandom()
    for _ in range(TRIES if top > LOWEST else 0):
        port = draw.randint(LOWEST, top)
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:
        sock.bind((host, 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` different free ports."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port(host)
        if port not in ports:
            ports.append(port)
    return ports
