"""What the README and the docs pages tell a new user, checked against what the program does
(issue 22's "wrong or stale README lines"), for the lines a try-out of the README found wrong.
Issue 34 moved those lines into docs/ by task: they are checked where they are now."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import trustme

from proxy.config.model import parse_config

ROOT = Path(__file__).resolve().parent.parent
# The README and the task pages (not docs/decisions/, the record of each decision).
DOCS = [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))]
API_PAGE = " ".join((ROOT / "docs" / "api.md").read_text(encoding="utf-8").split())


def test_purge_numbers_with_workers_are_the_fleets() -> None:
    """The README said purges are "numbered in each domain's sequence from 1"; with
    `workers = 2`, `cdn-proxy purge --url` printed `(purge 1795690650632031)`: the fleet's
    scripts number every clear and purge from one sequence that follows the clock."""
    for script in ("clear.lua", "purge.lua"):
        lua = (ROOT / "proxy" / "fleet" / "lua" / script).read_text(encoding="utf-8")
        assert "math.max(tonumber(previous) + 1, nowus)" in lua
        assert re.search(r"local previous = redis.call\('GET', KEYS\[2\]\)", lua)
    assert "numbers purges in each domain's sequence from 1, a clear taking the next" in API_PAGE
    assert "With workers or a fleet the number is the fleet's: one sequence for every" in API_PAGE
    assert "Purges are numbered in each domain's sequence from 1." not in API_PAGE


def _toml_blocks() -> list[str]:
    """Every ``toml`` sample of the README and the docs pages."""
    texts = [page.read_text(encoding="utf-8") for page in DOCS]
    return [b for text in texts for b in re.findall(r"```toml\n(.*?)```", text, flags=re.DOTALL)]


def _merged(fragment: dict[str, Any]) -> dict[str, Any]:
    """The README's fragment on the quick start's minimum: its tables' keys added, its
    [[domains]] in place of the example's."""
    data: dict[str, Any] = {
        "edge": {"listen": "127.0.0.1:8080"},
        "api": {"listen": "127.0.0.1:8081"},
        "cache": {"max_bytes": "1MiB"},
        "state": {"path": "state.db"},
        "domains": [{"name": "example.com", "origin": "http://127.0.0.1:9000"}],
    }
    for key, value in fragment.items():
        if key == "domains":
            data["domains"] = value
        else:
            data[key] = {**data.get(key, {}), **value}
    return data


@pytest.mark.parametrize("index", range(len(_toml_blocks())))
def test_every_toml_sample_of_the_readme_loads(tmp_path: Path, index: int) -> None:
    """A new user pastes the docs' samples into config/proxy.toml: each must load, with no
    key the loader does not know and no value it refuses (the stale-key check)."""
    fragment = tomllib.loads(_toml_blocks()[index])
    for domain in fragment.get("domains", []):
        if "tls_cert" in domain:  # "Serving HTTPS" names files made with openssl first
            leaf = trustme.CA().issue_cert(domain["name"])
            leaf.cert_chain_pems[0].write_to_path(str(tmp_path / domain["tls_cert"]))
            leaf.private_key_pem.write_to_path(str(tmp_path / domain["tls_key"]))
    parse_config(_merged(fragment), base_dir=tmp_path)


@pytest.mark.slow
def test_the_readme_has_toml_samples() -> None:
    assert len(_toml_blocks()) >= 8  # the parametrized test above is not vacuous


def test_no_page_says_config_check_refuses_config() -> None:
    """The new-operator trial of issue 34: the README and operations.md said `config check
    --config PATH` is refused, after it was made to take it (tests/test_config_check.py)."""
    for page in DOCS:
        text = " ".join(page.read_text(encoding="utf-8").split())
        assert "not `--config PATH`" not in text, page
        assert "`cdn-proxy config check --config PATH` is refused" not in text, page
