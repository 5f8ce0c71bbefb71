"""Paths of the control plane that a client must know as well as the server.

They live here, outside ``proxy.api``, because the ``purge`` client (``proxy.cli.main``) must not
import aiohttp to learn a path: it is a small urllib client run from deploy hooks.
"""

CLEAR_CACHE_PATH = "/api/v1/cdn/clear-cache"
PURGE_PATH = "/api/v1/cdn/purge"
