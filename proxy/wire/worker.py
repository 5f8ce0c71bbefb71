"""What an edge worker tells its node on standard output (proxy/process/worker.py writes,
proxy/process/supervisor.py and node.py read): ``ready`` once it listens, then one line per
reload, ``reloaded ok|failed DIGEST MESSAGE`` (DIGEST: the config file's, ``-`` if it could
not be read). Version 1 is those lines untagged; a worker restarted after an upgrade may be
of a newer build than its node, so a later version is tagged ``worker/<n>`` and refused here.
"""

from __future__ import annotations

import msgspec

from proxy.errors import WireError
from proxy.wire.versions import text_version

READS = (1,)
LINE = "worker"
NO_DIGEST = "-"


class Ready(msgspec.Struct, frozen=True):
    """The worker listens."""


class Reloaded(msgspec.Struct, frozen=True):
    """The worker re-read the config file: ``ok`` (applied) or not, with the digest of what
    it read (None: nothing read) and a message for the operator."""

    ok: bool
    digest: str | None
    message: str


WorkerLine = Ready | Reloaded


def pack_worker_line(line: WorkerLine) -> str:
    """One line, without its newline: a message's own line breaks become spaces."""
    if isinstance(line, Ready):
        return "ready"
    said = "ok" if line.ok else "failed"
    digest = line.digest or NO_DIGEST  # hex: one part
    message = " ".join(line.message.split())
    return f"reloaded {said} {digest} {message}".rstrip(" ")


def unpack_worker_line(text: str) -> WorkerLine:
    """A worker's line, without its newline; WireError for anything else."""
    _, body = text_version(LINE, text, READS)
    if body == "ready":
        return Ready()
    what, _, rest = body.partition(" ")
    said, _, rest = rest.partition(" ")
    digest, _, message = rest.partition(" ")
    if what != "reloaded" or said not in ("ok", "failed") or not digest:
        raise WireError(f"not a {LINE}: {text[:80]!r}")
    return Reloaded(said == "ok", None if digest == NO_DIGEST else digest, message)
