"""Which filesystem holds a path, and whether it is a network one (issue 31 §5).

The shared tier assumes one kernel: LMDB's locks live in shared memory, ``flock`` marks the
node's hold on its directory, and the fill markers judge a pid's liveness. On NFS, SMB, 9p,
CephFS, GlusterFS or a FUSE network mount, another machine may write the same files with
none of that holding, and LMDB's own docs forbid it. ``os.statvfs`` does not say which
filesystem a path is on, so the mount table does: ``/proc/self/mountinfo`` (proc(5)), the
mount whose point is the longest prefix of the path's nearest existing ancestor, resolved
(symbolic links followed), and its filesystem type (after the " - " separator).

``refusal(path)`` says why when it is a network one, else None (also when the table cannot
be read: the check is a guard, not a gate that breaks where /proc is not).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

MOUNTINFO = Path("/proc/self/mountinfo")
# Filesystem types served by another machine (their "fuse." subtypes included).
NETWORK = frozenset(
    {
        "nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs", "ncpfs", "9p", "ceph", "glusterfs",
        "afs", "lustre", "gpfs", "beegfs", "orangefs", "pvfs2", "ocfs2", "gfs2", "davfs",
        "fuse.sshfs", "fuse.glusterfs", "fuse.ceph", "fuse.cephfs", "fuse.s3fs", "fuse.rclone",
        "fuse.gcsfuse", "fuse.davfs2", "fuse.juicefs", "fuse.lizardfs", "fuse.moosefs",
        "fuse.mfs", "fuse.gvfsd-fuse", "fuse.seaweedfs", "fuse.goofys", "fuse.blobfuse",
        "fuse.blobfuse2", "fuse.sshfs-fuse", "fuse.curlftpfs",
    }
)  # fmt: skip
_ESCAPE = re.compile(r"\\([0-7]{3})")


class Mount(NamedTuple):
    point: str  # where it is mounted, unescaped
    fstype: str  # e.g. "ext4", "nfs4", "fuse.sshfs"
    source: str  # e.g. "/dev/vda", "server:/export"


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040...)."""
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a ``/proc/PID/mountinfo`` text, in its order (later mounts over earlier
    ones). Lines that do not parse are skipped."""
    mounts = []
    for line in text.splitlines():
        before, separator, after = line.partition(" - ")
        fields, tail = before.split(" "), after.split(" ")
        if not separator or len(fields) < 6 or len(tail) < 2:
            continue
        mounts.append(Mount(_unescape(fields[4]), tail[0], _unescape(tail[1])))
    return mounts


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount that holds ``path`` (absolute, resolved): the last one whose point is the
    longest prefix of it."""
    found: Mount | None = None
    for mount in mounts:
        point = mount.point.rstrip("/") or "/"
        inside = path == point or path.startswith(point + "/") or point == "/"
        if inside and (found is None or len(point) >= len(found.point.rstrip("/") or "/")):
            found = mount
    return found


def is_network(fstype: str) -> bool:
    return fstype in NETWORK or fstype.split(".")[0] in NETWORK


def existing(path: Path) -> str:
    """``path``'s nearest existing ancestor (itself when it exists), resolved."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return os.path.realpath(candidate)
    return "/"


def filesystem_of(path: Path) -> Mount | None:
    """The mount that holds ``path`` (or would, once made); None when unknown."""
    try:
        mounts = parse_mountinfo(MOUNTINFO.read_text(errors="replace"))
    except OSError:
        return None
    return mount_of(existing(path.absolute()), mounts)


def refusal(path: Path, mounts: list[Mount] | None = None) -> str | None:
    """Why the shared tier refuses ``path``, or None: the message names the mount. Judged
    against this process's mount table, or ``mounts`` (``path`` then taken as it is)."""
    mount = filesystem_of(path) if mounts is None else mount_of(str(path), mounts)
    if mount is None or not is_network(mount.fstype):
        return None
    return (
        f"is on a network filesystem ({mount.fstype}, {mount.source} mounted on "
        f"{mount.point}): the shared tier needs a local one (LMDB, flock and pid checks "
        "assume one kernel)"
    )
