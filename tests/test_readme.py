"""What the README says a new user will see, checked against the code that makes it
(issue 22 item 8: its samples and rules had drifted from the program)."""

from __future__ import annotations

import re
from pathlib import Path

from proxy.core.cache.policy import HEURISTIC_FRACTION, HEURISTIC_MAX
from proxy.core.purge.purges import PurgeResult
from proxy.core.purge.receipts import describe, receipt
from proxy.state.admins import MIN_PASSWORD_LENGTH

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def shell_lines() -> list[str]:
    """Every line of the README's ``sh`` blocks."""
    blocks = re.findall(r"```sh\n(.*?)```", README, flags=re.DOTALL)
    return [line for block in blocks for line in block.splitlines()]


def test_the_purge_receipt_sample_is_what_the_cli_prints() -> None:
    """The sample said ``at most 120 entries`` and ``(purge 1732441234567890)``; purges are
    numbered from 1 and a lazy purge's number is the domain's."""
    [sample] = [line for line in shell_lines() if line.startswith("#   purged 1 prefix")]
    prefix = PurgeResult(
        "example.com", "prefix", ("/assets/",), False, False, 1, 3, 120, 1468006, False, 0.0
    )
    assert sample.removeprefix("#   ") == describe(receipt(prefix, 0.0008))


def test_no_sample_runs_a_bare_cdn_proxy_purge() -> None:
    """``cdn-proxy`` is in .venv/bin after the quick start, not on PATH: the deploy-hook
    lines call it by its path."""
    assert [line for line in shell_lines() if line.startswith("cdn-proxy purge")] == []
    assert "CDN=/path/to/cdn-proxy/.venv/bin/cdn-proxy" in shell_lines()


def test_the_heuristic_freshness_rule_is_the_codes() -> None:
    assert HEURISTIC_MAX == 86_400
    assert (
        f"fresh for {HEURISTIC_FRACTION:.0%} of the time since its `Last-Modified`, at most a day"
        in " ".join(README.split())
    )


def test_the_admin_password_minimum_is_the_codes() -> None:
    assert f"password (at least {MIN_PASSWORD_LENGTH} characters)" in " ".join(README.split())
