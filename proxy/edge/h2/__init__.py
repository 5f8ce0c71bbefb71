"""HTTP/2 on the edge (decision 0036): a frame layer of our own, sans I/O, behind an asyncio
protocol, each stream served by the same ``Edge.handle`` as an HTTP/1.1 request.

- ``frames``: frame layout, and a stateless HPACK encoder for what the edge sends;
- ``head``: a request head checked (RFC 9113 §8.2-8.3) and read as the edge reads an
  HTTP/1.1 one;
- ``events``: what the machine reports, and its connection error;
- ``streams``, ``machine``: the server's state machine: the streams and what is sent on
  them, and the client's frames turned into events;
- ``limits``: the per-connection limits (config keys and their defaults) and the budgets
  that turn floods, Rapid Reset and MadeYouReset into a GOAWAY;
- ``stream``: one stream's answer, written as HEADERS and DATA within the client's windows;
- ``connection``: one connection: bytes in, events to streams, frames out, timers, GOAWAY;
- ``front``: every HTTP/2 connection of a listener, made and shut down together.
"""
