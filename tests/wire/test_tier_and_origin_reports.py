"""A member info's tier and origin-server figures (proxy/wire/reports.py): written and read
back, absent in an older build's info (read at their defaults), and refused when of the
wrong type (the member is then left out of the sums, as for any unreadable info)."""

from __future__ import annotations

import pytest

from proxy.errors import WireError
from proxy.wire.reports import (
    MemberInfo,
    ServerReport,
    TierReport,
    pack_member_info,
    unpack_member_info,
)


def test_tier_and_servers_round_trip() -> None:
    info = MemberInfo(
        node="n1",
        worker=1,
        tier=TierReport(disk_hits=4, collapsed=2, dropped_fills=1, degraded="fill: full"),
        origins=[
            ServerReport(domain="a.test", origin="http://10.0.0.1:80", up=False, errors=3),
            ServerReport(domain="a.test", origin="http://10.0.0.2:80", backup=True, requests=9),
        ],
    )
    assert unpack_member_info(pack_member_info(info)) == info


def test_an_older_builds_info_reads_without_them() -> None:
    info = unpack_member_info('{"node":"n1","counts":{"a.test":{"hit":3}}}')
    assert info.tier is None and info.origins == []


@pytest.mark.parametrize(
    "text",
    ['{"tier":{"disk_hits":"3"}}', '{"origins":[["a.test"]]}', '{"origins":{"a.test":1}}'],
)
def test_a_wrong_type_refuses_the_info(text: str) -> None:
    with pytest.raises(WireError):
        unpack_member_info(text)
