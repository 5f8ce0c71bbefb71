"""Paths of the control plane that a client must know as well as the server.

They live here, outside ``proxy.api``, because the ``purge`` client (``proxy.cli.purge``), a
small urllib client run from deploy hooks, must learn a path without importing aiohttp.
"""

CLEAR_CACHE_PATH = "/api/v1/cdn/clear-cache"
PURGE_PATH = "/api/v1/cdn/purge"
TRACE_PATH = "/api/v1/cdn/trace"
