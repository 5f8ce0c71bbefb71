"""HTTP/2 on the edge (decision 0036): the h2 library's state machine behind an asyncio
protocol, each stream served by the same ``Edge.handle`` as an HTTP/1.1 request.

- ``limits``: the per-connection limits (config keys and their defaults) and the budgets
  that turn floods and Rapid Reset into a GOAWAY;
- ``head``: a request head read as the edge reads an HTTP/1.1 one;
- ``stream``: one stream's answer, written as HEADERS and DATA within the client's windows;
- ``connection``: one connection: frames in, events to streams, frames out, timers, GOAWAY;
- ``front``: every HTTP/2 connection of a listener, made and shut down together.
"""
