"""The control plane: the clear-cache API and its health check, on a listener of its own."""

from proxy.api.app import create_api_app

__all__ = ["create_api_app"]
