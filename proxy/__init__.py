"""cdn-proxy: a caching reverse proxy (CDN edge) with an instant clear-cache API."""

__version__ = "0.1.0"
