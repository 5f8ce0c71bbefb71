"""The TLS part of the configuration: certificate, key and CA files, read and checked.

proxy/config/model.py builds the tables and checks their TLS files with these loaders
(``checked_tls``); the edge builds its contexts with the same ``load_server_pair`` and
``load_origin_ca`` (proxy/edge/tls.py), so the files are read by this one module and every
problem with them is a ConfigError naming the key, whether it is found at start-up or at a
reload.

Paths are relative to the config file's directory, as state.path is. The files are checked
only on a node with an [edge] table: a control-plane node never opens them, and may run on a
machine that does not hold them.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from proxy.errors import ConfigError


class _Encrypted(Exception):
    """The key asks for a passphrase: there is no one to type it."""


def _no_passphrase() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal, and a service would hang.
    raise _Encrypted


def load_server_pair(context: ssl.SSLContext, cert: Path, key: Path, where: str) -> None:
    """Load ``cert`` (PEM: the certificate, then its chain) and ``key`` into ``context``.
    ``where`` is the table the keys belong to (``edge``, ``domains[0]``)."""
    _readable(f"{where}.tls_cert", cert)
    _readable(f"{where}.tls_key", key)
    try:
        # A throwaway context: does the file hold a certificate at all? (load_cert_chain's
        # own error does not say which of the two files it could not parse.)
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=cert)
    except ssl.SSLError:
        raise ConfigError(f"{where}.tls_cert", f"{cert} holds no PEM certificate") from None
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except _Encrypted:
        raise ConfigError(
            f"{where}.tls_key", f"{key} is encrypted: give the key without a passphrase"
        ) from None
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ConfigError(
                f"{where}.tls_key", f"{key} does not match the certificate in {cert}"
            ) from None
        raise ConfigError(f"{where}.tls_key", f"{key} holds no PEM private key") from None


def load_origin_ca(path: Path, where: str) -> ssl.SSLContext:
    """A client context that trusts only the CA certificates in ``path`` (PEM), checking
    the origin's name as the system store's default context does."""
    _readable(f"{where}.origin_ca", path)
    try:
        return ssl.create_default_context(cafile=path)
    except ssl.SSLError:
        raise ConfigError(f"{where}.origin_ca", f"{path} holds no PEM certificate") from None


def _readable(key: str, path: Path) -> None:
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise ConfigError(key, f"{path} cannot be read ({exc.strerror or exc})") from None
