"""What the README tells a new user, checked against what the program does (issue 22's
"wrong or stale README lines"), for the lines a try-out of the README found wrong."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())


def test_purge_numbers_with_workers_are_the_fleets() -> None:
    """The README said purges are "numbered in each domain's sequence from 1"; with
    `workers = 2`, `cdn-proxy purge --url` printed `(purge 1795690650632031)`: the fleet's
    scripts number every clear and purge from one sequence that follows the clock."""
    for script in ("clear.lua", "purge.lua"):
        lua = (ROOT / "proxy" / "fleet" / "lua" / script).read_text(encoding="utf-8")
        assert "math.max(tonumber(previous) + 1, nowus)" in lua
        assert re.search(r"local previous = redis.call\('GET', KEYS\[2\]\)", lua)
    assert "numbers purges in each domain's sequence from 1, a clear taking the next" in README
    assert "with workers or a fleet the number is the fleet's: one sequence for every" in README
    assert "Purges are numbered in each domain's sequence from 1." not in README
