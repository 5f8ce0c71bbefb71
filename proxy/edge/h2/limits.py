"""What one HTTP/2 connection may cost (decision 0036), from ``[edge]``.

Memory per connection is bounded by what the edge grants, not by what the client sends:

- request bodies (decision 0045): the windows reopen only by what the handler has read out
  of a stream's reader, never by what merely arrived, so a stream holds at most its window
  (``STREAM_WINDOW``) unread, and all of a connection's streams together at most the
  connection's (``CONNECTION_WINDOW``, 1 MiB); what the handler reads into its own buffer
  counts against the process's edge.request_buffer_total_bytes, as an HTTP/1.1 body does;
  a stream that ends or is reset gives what it held unread back to the connection's window;
- request heads: the decoded header list is at most ``max_header_list_bytes`` (HPACK bomb),
  the encoded block (HEADERS and CONTINUATION payloads) at most twice that, refused before
  it is decoded (machine.py's ``BLOCK_FACTOR``), and the machine keeps 16 small heads it
  has read (machine.py's head cache: 72 KiB at most);
- answers: a stream's DATA waits for the client's window, and frames queued to a socket
  whose client does not read (PING and SETTINGS acknowledgements included) stop the
  connection from being read past the transport's high-water mark, so a flood cannot grow
  the queue; a stalled answer is reset after ``send_timeout``.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.config.model import EdgeConfig
from proxy.config.settings import settings_of

STREAM_WINDOW = 65_535  # RFC 9113's initial window: what a stream's body may send unread
CONNECTION_WINDOW = 1024 * 1024  # all streams' bodies together, reopened as they are read
MAX_FRAME = 16_384  # SETTINGS_MAX_FRAME_SIZE, the RFC's minimum and default


@dataclass(frozen=True, slots=True)
class H2Limits:
    max_concurrent_streams: int = 128
    max_header_list_bytes: int = 64 * 1024
    max_requests: int = 1000
    reset_budget: int = 256
    control_frames_per_second: int = 100
    control_frame_burst: int = 1000
    send_timeout: float = 60.0
    idle_timeout: float = 30.0  # keepalive_timeout: no stream open
    preface_timeout: float = 15.0  # header_timeout: until the first request's head

    @classmethod
    def of(cls, edge: EdgeConfig) -> H2Limits:
        """The ``edge.http2_*`` keys, and the edge's timeouts under their HTTP/2 names."""
        return settings_of(
            cls,
            edge,
            prefix="http2_",
            send_timeout=edge.send_timeout,
            idle_timeout=edge.keepalive_timeout,
            preface_timeout=edge.header_timeout,
        )


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved: ``take`` is False once spent. The
    caller passes the time (a monotonic clock), so the rule is tested without one."""

    __slots__ = ("_burst", "_rate", "_stamp", "_tokens")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        self._rate = rate
        self._burst = burst
        self._tokens = burst
        self._stamp = now

    def take(self, now: float, cost: float = 1.0) -> bool:
        tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now
        self._tokens = tokens - cost
        return self._tokens >= 0


class ResetBudget:
    """Rapid Reset (CVE-2023-44487): each stream the client cancels before its answer is done
    spends one, each answer it lets finish earns one back (up to the budget). Spent: the
    connection is closed, whatever the pace (a slow trickle of resets between completed
    answers never spends it)."""

    __slots__ = ("_budget", "left")

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self.left = budget

    def cancelled(self) -> bool:
        """One stream cancelled early; False once the budget is spent."""
        self.left -= 1
        return self.left >= 0

    def finished(self) -> None:
        if self.left < self._budget:
            self.left += 1
