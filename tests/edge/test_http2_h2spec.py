"""h2spec, the public HTTP/2 conformance suite (RFC 7540 and RFC 7541: 146 tests), against a
real ``cdn-proxy serve`` (issue 30, "An external suite"; decision 0044).

The binary is not part of the project: it sits beside it, at ``../shared/tools/h2spec`` from
the repository's root (../shared/tools/README.md), and CI runs with a copy of ``shared/``
beside the clone. Without it the tests skip, saying so. h2spec sends ``:authority`` as the
host it is given, so the node serves a domain named ``127.0.0.1``, whose origin answers
``GET /`` at once. Over TLS no test may fail. Over h2c one fails, by design: the plain
listener speaks HTTP/1.1 as well, so bytes that are not the HTTP/2 preface are an HTTP/1.1
request to it, answered 400 in HTTP/1.1, where h2spec's "Sends invalid connection preface"
wants a GOAWAY or a bare close (H2C_DIFFERENCES).

Run by hand: ``../shared/tools/h2spec -t -k -h 127.0.0.1 -p PORT -o 5`` against a node's
TLS listener (``-t -k``: TLS, any certificate), without ``-t -k`` against an h2c one.
"""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

from tests.conftest import Origin
from tests.edge.tls_support import Certificates
from tests.nodes import Node

ROOT = Path(__file__).resolve().parents[2]
H2C_DIFFERENCES = ("Sends invalid connection preface",)
H2SPEC = ROOT / ".." / "shared" / "tools" / "h2spec"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not H2SPEC.is_file(), reason=f"h2spec is not at {H2SPEC} (../shared/tools/README.md)"
    ),
]


def node_config(tmp_path: Path, origin: Origin, *, tls: bool) -> Path:
    # h2spec names no server (SNI) when it is given an address: the default certificate.
    pair = Certificates(tmp_path).issue("127.0.0.1")
    listener = "h2c = true"
    if tls:
        listener = f'tls_listen = "127.0.0.1:0"\ntls_cert = "{pair.cert}"\ntls_key = "{pair.key}"'
    path = tmp_path / "proxy.toml"
    path.write_text(
        f"""
[edge]
listen = "127.0.0.1:0"
{listener}
shutdown_timeout = 5
[api]
listen = "127.0.0.1:0"
[cache]
max_bytes = "8MiB"
[state]
path = "state.db"
[[domains]]
name = "127.0.0.1"
origin = "{origin.url}"
""",
        encoding="utf-8",
    )
    return path


async def h2spec(url: str, report: Path, *, tls: bool) -> list[str]:
    """Run h2spec against ``url``; the names of the tests it failed (from its JUnit XML)."""
    port = url.rpartition(":")[2]
    flags = ["-t", "-k"] if tls else []
    process = await asyncio.create_subprocess_exec(
        str(H2SPEC),
        *flags,
        *("-h", "127.0.0.1", "-p", port, "-o", "5", "-j", str(report)),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), 600)
    return failures(report, output.decode(errors="replace"))


def failures(report: Path, output: str) -> list[str]:
    """The tests h2spec's JUnit XML says failed, each with its message."""
    assert report.is_file(), output[-2000:]
    cases = list(ElementTree.parse(report).getroot().iter("testcase"))
    assert len(cases) >= 140, output[-2000:]
    return [
        f"{case.get('classname')} {case.get('name')}: "
        + " ".join((element.get("message") or element.text or "") for element in case)
        for case in cases
        if case.find("failure") is not None or case.find("error") is not None
    ]


@pytest.mark.parametrize("tls", [True, False], ids=["tls", "h2c"])
async def test_h2spec_finds_no_failure(
    tmp_path: Path, origin: Origin, nodes: list[Node], tls: bool
) -> None:
    origin.reply("/", b"hello", headers={"Cache-Control": "max-age=60"})
    node = await Node.start(node_config(tmp_path, origin, tls=tls), roles=3 if tls else 2)
    nodes.append(node)
    url = node.addresses["edge-tls"] if tls else node.edge
    failed = await h2spec(url, tmp_path / "h2spec.xml", tls=tls)
    if tls:
        assert failed == []
    else:
        assert [f for f in failed if not f.startswith(H2C_DIFFERENCES)] == []
