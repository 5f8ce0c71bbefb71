"""The TLS part of the configuration: certificate, key and CA files, read and checked.

config.py builds the tables and calls ``checked_tls`` once they are built; the edge builds its
contexts with ``load_server_pair`` and ``load_origin_ca`` (proxy/edge/tls.py), so the files
are read by this one module and every problem with them is a ConfigError naming the key,
whether it is found at start-up or at a reload.

Paths are relative to the config file's directory, as state.path is. The files are checked
only on a node with an [edge] table: a control-plane node never opens them, and may run on a
machine that does not hold them.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from proxy.errors import ConfigError

if TYPE_CHECKING:
    from proxy.config.model import DomainConfig, EdgeConfig


_Table = TypeVar("_Table", "EdgeConfig", "DomainConfig")


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


def checked_tls(
    edge: EdgeConfig | None, domains: Sequence[DomainConfig], base_dir: Path
) -> tuple[EdgeConfig | None, tuple[DomainConfig, ...]]:
    """The [edge] and [[domains]] tables with their TLS paths resolved against ``base_dir``,
    each certificate and key pair loaded once (on an edge node) to prove it good."""
    if edge is not None:
        edge = _with_pair(edge, "edge", base_dir)
    resolved = []
    for index, domain in enumerate(domains):
        domain = _with_pair(domain, f"domains[{index}]", base_dir)
        if domain.origin_ca is not None:
            if not domain.origin.startswith("https://"):
                raise ConfigError(
                    f"domains[{index}].origin_ca", "is only for an origin given as https://"
                )
            domain = dataclasses.replace(domain, origin_ca=base_dir / domain.origin_ca)
        resolved.append(domain)
    if edge is None:
        return edge, tuple(resolved)
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    if edge.tls_cert is not None and edge.tls_key is not None:
        load_server_pair(probe, edge.tls_cert, edge.tls_key, "edge")
    for index, domain in enumerate(resolved):
        if domain.tls_cert is not None and domain.tls_key is not None:
            load_server_pair(probe, domain.tls_cert, domain.tls_key, f"domains[{index}]")
        if domain.origin_ca is not None:
            load_origin_ca(domain.origin_ca, f"domains[{index}]")
    if edge.tls_listen is not None:
        if edge.tls_cert is None and all(domain.tls_cert is None for domain in resolved):
            raise ConfigError(
                "edge.tls_listen", "needs a certificate: edge.tls_cert or a domain's tls_cert"
            )
        if edge.tls_listen == edge.listen and edge.listen.port:
            raise ConfigError("edge.tls_listen", "must differ from edge.listen")
    return edge, tuple(resolved)


def _with_pair(table: _Table, where: str, base_dir: Path) -> _Table:
    """The table with tls_cert and tls_key resolved; both or neither must be given."""
    if (table.tls_cert is None) != (table.tls_key is None):
        given, missing = (
            ("tls_cert", "tls_key") if table.tls_key is None else ("tls_key", "tls_cert")
        )
        raise ConfigError(f"{where}.{missing}", f"is required with {where}.{given}")
    if table.tls_cert is None or table.tls_key is None:
        return table
    return dataclasses.replace(
        table, tls_cert=base_dir / table.tls_cert, tls_key=base_dir / table.tls_key
    )
