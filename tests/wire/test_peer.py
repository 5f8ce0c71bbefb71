"""The peer purge label on the wire (proxy/wire/peer.py): what an owner writes reads back,
and anything else reads as no label, so the asking node goes to the origin."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.peer import PeerScheme, PurgeLabel
from proxy.wire.peer import pack_label, pack_scheme, unpack_label, unpack_scheme


@given(st.from_regex(r"[0-9a-f]{1,32}", fullmatch=True), st.integers(0, 2**63))
def test_a_label_reads_back(epoch: str, value: int) -> None:
    label = PurgeLabel(epoch, value)
    assert unpack_label(pack_label(label)) == label


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "e1 7",  # untagged
        "peer-label/2 e1 7",  # a later version
        "other/1 e1 7",
        "peer-label/1 e1",
        "peer-label/1 e1 -7",
        "peer-label/1 e1 7 8",
        "peer-label/1  7",
        "peer-label/1 e\x001 7",
        "peer-label/1 e1 " + "9" * 30,
    ],
)
def test_anything_else_is_no_label(text: str | None) -> None:
    assert unpack_label(text) is None


@given(st.text(max_size=80))
def test_any_text_is_a_label_or_none(text: str) -> None:
    label = unpack_label(text)
    assert label is None or unpack_label(pack_label(label)) == label


@given(st.sampled_from(["http", "https"]), st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True))
def test_a_scheme_claim_reads_back(scheme: str, key: str) -> None:
    claim = PeerScheme(scheme, key)
    assert unpack_scheme(pack_scheme(claim)) == claim


@pytest.mark.parametrize(
    "text",
    [
        "",
        "https k",  # untagged
        "peer-scheme/2 https k",  # a later version
        "peer-scheme/1 ftp k",
        "peer-scheme/1 https",
        "peer-scheme/1 https k\x00",
        "peer-scheme/1 https " + "k" * 129,
    ],
)
def test_anything_else_is_no_claim(text: str) -> None:
    assert unpack_scheme(text) is None
