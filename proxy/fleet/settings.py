"""The fleet's settings (``[fleet]``, docs/decisions/0014), built from the config's
``FleetConfig`` by ``proxy.process.worker.fleet_settings`` for the workers and the node."""

from __future__ import annotations

from dataclasses import dataclass

MAX_REPLICAS = 16


@dataclass(frozen=True, slots=True)
class FleetSettings:
    """``[fleet]`` (0014 "Settings"). ``timeout`` bounds every Valkey call; ``margin`` is the
    lease margin (None: 10% of the lease, at least 100 ms); ``hints`` turns the pub/sub hints
    off (tests and benchmarks: correctness must not need them); ``replicas`` is how many
    replicas must confirm each clear and each sync (``WAIT``) before it counts (0: off)."""

    url: str
    lease: float = 2.0
    renew: float = 0.5
    clear_timeout: float = 5.0
    poll_interval: float = 0.05
    timeout: float = 0.5
    margin: float | None = None
    hints: bool = True
    replicas: int = 0
    peer_fill: bool = False  # its members keep the list of peer nodes (decision 0047)

    def __post_init__(self) -> None:
        if not 0 < self.renew < self.lease:
            raise ValueError("fleet: need 0 < renew < lease")
        if self.timeout <= 0 or self.poll_interval <= 0 or self.clear_timeout <= 0:
            raise ValueError("fleet: timeouts must be positive")
        if not 0 <= self.replicas <= MAX_REPLICAS:
            raise ValueError(f"fleet: replicas must be 0 to {MAX_REPLICAS}")
