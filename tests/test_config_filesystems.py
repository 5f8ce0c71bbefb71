"""The shared tier refuses a network filesystem for ``cache.disk_path`` (issue 31 §5): the
mount table is read from /proc/self/mountinfo (proc(5)), the mount holding the path found,
its type judged. Samples of real mount tables, and a real check of this machine's tmp."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.config.filesystems import (
    Mount,
    filesystem_of,
    is_network,
    mount_of,
    parse_mountinfo,
    refusal,
)
from proxy.store.shared import SharedTier
from tests.nodes import cli, write_config

SAMPLE = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
30 27 0:45 / /var/cache/cdn rw,relatime shared:5 - nfs4 files.lan:/export/cdn rw,vers=4.2
31 30 259:1 / /var/cache/cdn/local rw,relatime - xfs /dev/nvme0n1p1 rw
32 27 0:50 / /mnt/with\\040space rw - cifs //nas/share rw,vers=3.0
33 27 0:51 / /home/ops/remote rw,nosuid master:7 - fuse.sshfs ops@host:/srv rw,user_id=0
34 27 0:52 /sub /mnt/p9 rw - 9p hostshare rw,trans=virtio
35 27 0:53 / /mnt/ceph rw - ceph 10.0.0.1:6789:/ rw,name=admin
36 27 0:54 / /mnt/gluster rw - fuse.glusterfs gl1:/vol rw
37 27 0:55 / /mnt/cephfuse rw - fuse.ceph-fuse ceph-fuse rw
38 27 0:56 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw
not a mountinfo line
"""


def test_every_line_of_a_mount_table_is_read() -> None:
    mounts = parse_mountinfo(SAMPLE)
    assert len(mounts) == 11
    assert mounts[2] == Mount("/var/cache/cdn", "nfs4", "files.lan:/export/cdn")
    assert mounts[4] == Mount("/mnt/with space", "cifs", "//nas/share")  # \040 unescaped
    assert mounts[5].fstype == "fuse.sshfs"  # optional fields before the separator


@pytest.mark.parametrize(
    ("path", "fstype", "network"),
    [
        ("/var/lib/cdn", "ext4", False),
        ("/var/cache/cdn", "nfs4", True),
        ("/var/cache/cdn/tier", "nfs4", True),
        ("/var/cache/cdnx", "ext4", False),  # a prefix of the name is not the mount
        ("/var/cache/cdn/local/tier", "xfs", False),  # a local mount inside a network one
        ("/mnt/with space/tier", "cifs", True),
        ("/home/ops/remote/cache", "fuse.sshfs", True),
        ("/mnt/p9/cache", "9p", True),
        ("/mnt/ceph", "ceph", True),
        ("/mnt/gluster/x", "fuse.glusterfs", True),
        ("/mnt/cephfuse/x", "fuse.ceph-fuse", False),  # a FUSE type not listed: local
        ("/tmp/cache", "tmpfs", False),
        ("/", "ext4", False),
    ],
)
def test_the_mount_holding_a_path_and_whether_it_is_remote(
    path: str, fstype: str, network: bool
) -> None:
    mount = mount_of(path, parse_mountinfo(SAMPLE))
    assert mount is not None and mount.fstype == fstype
    assert is_network(mount.fstype) is network


def test_a_later_mount_over_the_same_point_wins() -> None:
    table = SAMPLE + "40 27 0:60 / /var/cache/cdn rw - ext4 /dev/vdb rw\n"
    mount = mount_of("/var/cache/cdn/tier", parse_mountinfo(table))
    assert mount is not None and mount.fstype == "ext4"


def test_this_machines_tmp_is_local_and_accepted(tmp_path: Path) -> None:
    """A real check: tmp's filesystem is found in this process's mount table (a path not made
    yet is judged by its nearest ancestor), and the tier opens on it."""
    mount = filesystem_of(tmp_path / "not" / "made" / "yet")
    assert mount is not None and mount.fstype
    assert not is_network(mount.fstype)
    assert refusal(tmp_path) is None
    SharedTier.open_node(tmp_path / "cache", max_bytes=4 << 20).close()


def test_the_refusal_names_the_mount_and_why() -> None:
    mounts = parse_mountinfo(SAMPLE)
    refused = refusal(Path("/var/cache/cdn/tier"), mounts)
    assert refused is not None
    assert "network filesystem (nfs4, files.lan:/export/cdn mounted on /var/cache/cdn)" in refused
    assert refusal(Path("/var/cache/cdn/local/tier"), mounts) is None
    assert refusal(Path("/var/lib/cdn"), mounts) is None


async def test_config_check_accepts_a_local_disk_path(tmp_path: Path) -> None:
    config = write_config(
        tmp_path, "http://127.0.0.1:9", cache=f'disk_path = "{tmp_path / "cache"}"'
    )
    status, _, err = await cli("config", "check", str(config))
    assert status == 0, err
