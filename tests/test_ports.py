"""benchmarks/ports.py: the ports servers are started on are drawn below the ephemeral range,
where no outgoing connection takes them between the choice and the server's bind."""

from __future__ import annotations

import socket

from benchmarks.ports import LOWEST, ephemeral_low, free_port, free_ports


def test_a_free_port_is_below_the_ephemeral_range_and_can_be_bound() -> None:
    low = ephemeral_low()
    ports = free_ports(20)
    assert len(set(ports)) == 20
    for port in ports:
        assert LOWEST <= port < low
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_held_by_a_listener_is_never_handed_out() -> None:
    held = []
    try:
        for _ in range(50):
            sock = socket.socket()
            sock.bind(("127.0.0.1", free_port()))
            sock.listen()
            held.append(sock)
        taken = {sock.getsockname()[1] for sock in held}
        assert not taken & set(free_ports(200))
    finally:
        for sock in held:
            sock.close()
