"""What the README and the docs pages say a new user will see, checked against the code that
makes it (issue 22 item 8: its samples and rules had drifted from the program). Issue 34 moved
most of the README into docs/ by task: the samples are checked where they now are, the
README's own commands are run as written, and every link between the pages resolves."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import select
import subprocess
import sys
import termios
import tomllib
from pathlib import Path

import pytest

from benchmarks.ports import free_ports as _free_ports
from proxy.core.cache.freshness import HEURISTIC_FRACTION, HEURISTIC_MAX
from proxy.core.purge.purges import PurgeResult
from proxy.core.purge.receipts import describe, receipt
from proxy.state.admins import MIN_PASSWORD_LENGTH
from tests.nodes import ENV, Node, cli

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
# The task pages (docs/decisions/ are the record of each decision, not pages to keep true).
PAGES = {path: path.read_text(encoding="utf-8") for path in sorted(ROOT.glob("docs/*.md"))}
ALL = [README, *PAGES.values()]
MAX_README_LINES = 300  # issue 34: a front door that fits on a few screens


def sh_blocks(text: str) -> list[str]:
    return re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL)


def shell_lines() -> list[str]:
    """Every line of the ``sh`` blocks of the README and the docs pages."""
    return [line for text in ALL for block in sh_blocks(text) for line in block.splitlines()]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_the_readme_fits_its_budget() -> None:
    assert len(README.splitlines()) <= MAX_README_LINES


def test_the_readmes_test_command_is_what_ci_runs() -> None:
    """.ci/run calls ./scripts/test, which must stay the README's test command."""
    assert "exec ./scripts/test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    [quick_start] = [block for block in sh_blocks(README) if "./scripts/serve" in block]
    assert [line.split()[0] for line in quick_start.splitlines()] == [
        "./scripts/serve",
        "./scripts/test",
    ]
    assert './scripts/test -m "not slow"' in README


def test_the_readme_gives_both_durations_of_the_suite_as_measured() -> None:
    """Issue 34 §5: "the README gives both durations". They are the development page's,
    where the measurement and its command are."""
    table = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    whole = re.search(r"whole suite, [\d,]+ tests\) \| ([\d]+ min [\d]+ s)", table)
    quick = re.search(r"quick subset, about [\d,]+ tests\) \| ([\d]+ min [\d]+ s)", table)
    assert whole is not None and quick is not None
    assert f"the whole suite takes {whole[1]}" in " ".join(README.split())
    assert f"The quick subset takes {quick[1]}" in " ".join(README.split())


def test_every_feature_in_the_readme_links_to_its_page() -> None:
    """Issue 34 §1: "a short feature list, each item linking to its page"."""
    features = README.split("## Features")[1].split("## Where to go next")[0]
    items = re.split(r"\n- ", features)[1:]
    assert len(items) >= 15
    unlinked = [item.split("\n")[0] for item in items if "](docs/" not in item]
    assert unlinked == []


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
    assert any("CDN=/path/to/cdn-proxy/.venv/bin/cdn-proxy" in b for b in sh_blocks(README))


def test_the_heuristic_freshness_rule_is_the_codes() -> None:
    assert HEURISTIC_MAX == 86_400
    assert (
        f"fresh for {HEURISTIC_FRACTION:.0%} of the time since its `Last-Modified`, at most a day"
        in flat(PAGES[ROOT / "docs" / "caching.md"])
    )


def test_the_admin_password_minimum_is_the_codes() -> None:
    assert f"password (at least {MIN_PASSWORD_LENGTH} characters)" in flat(
        PAGES[ROOT / "docs" / "dashboard.md"]
    )


# -- links --------------------------------------------------------------------------------------


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _read(file: Path) -> str:
    return file.read_text(encoding="utf-8") if file.exists() else ""


def _anchors(text: str) -> set[str]:
    body = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return {_anchor(m) for m in re.findall(r"^#{1,6} (.+)$", body, flags=re.MULTILINE)}


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: p.name)
def test_every_relative_link_resolves(page: Path) -> None:
    """A page moved into docs/ keeps its links: each file exists, each #anchor is a heading."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        missing = anchor and file.suffix == ".md" and anchor not in _anchors(_read(file))
        if not file.exists() or missing:
            broken.append(target)
    assert broken == []


# -- the README's commands, run as written -------------------------------------------------------


def _typed_on_a_terminal(argv: list[str], answers: list[tuple[str, str]]) -> tuple[int, str]:
    """Run ``argv`` with a terminal of its own (a pty as its controlling terminal, as a shell
    gives), typing each answer once its prompt has appeared; its exit status and output."""
    master, slave = pty.openpty()

    def own_terminal() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    with subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=ENV, preexec_fn=own_terminal
    ) as process:
        os.close(slave)
        seen, at = "", 0
        try:
            while True:
                ready, _, _ = select.select([master], [], [], 30)
                assert ready, f"no prompt came: {seen!r}"
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child has closed its terminal
                    break
                if not chunk:
                    break
                seen += chunk.decode()
                if answers and (found := seen.find(answers[0][0], at)) >= 0:
                    at = found + len(answers[0][0])
                    os.write(master, answers.pop(0)[1].encode() + b"\n")
        finally:
            os.close(master)
        return process.wait(timeout=30), seen


def _minimal_config() -> str:
    [block] = [
        block
        for block in re.findall(r"```toml\n(.*?)```", README, flags=re.DOTALL)
        if "[state]" in block
    ]
    tomllib.loads(block)
    return str(block)


@pytest.mark.slow
async def test_try_it_and_the_deploy_hook_run_as_written(tmp_path: Path, nodes: list[Node]) -> None:
    """The README's minimal config, its "Try it" and its deploy-hook lines, run with only the
    ports and paths moved: each output its comments show comes, in order."""
    edge, api, origin = _free_ports(3)
    config = tmp_path / "proxy.toml"
    config.write_text(
        _minimal_config()
        .replace("127.0.0.1:8080", f"127.0.0.1:{edge}")
        .replace("127.0.0.1:8081", f"127.0.0.1:{api}")
        .replace("127.0.0.1:9000", f"127.0.0.1:{origin}"),
        encoding="utf-8",
    )
    wrapper = tmp_path / "cdn-proxy"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m proxy "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)

    [try_it] = [block for block in sh_blocks(README) if "proxy.demo_origin" in block]
    [hook] = [block for block in sh_blocks(README) if block.startswith("export CDN_PROXY_TOKEN")]
    first, *rest = try_it.splitlines()
    assert first.startswith(".venv/bin/python -m proxy.demo_origin &")
    script = "\n".join([*rest, *hook.splitlines()])
    for written, moved in (
        ("/path/to/cdn-proxy/.venv/bin/cdn-proxy", str(wrapper)),
        ("/path/to/cdn-proxy/config/proxy.toml", str(config)),
        (".venv/bin/cdn-proxy", str(wrapper)),
        ("config/proxy.toml", str(config)),
        ("127.0.0.1:8080", f"127.0.0.1:{edge}"),
        ("127.0.0.1:8081", f"127.0.0.1:{api}"),
        ("export CDN_PROXY_TOKEN=...", 'export CDN_PROXY_TOKEN="$TOKEN"'),
    ):
        script = script.replace(written, moved)

    demo = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy.demo_origin",
        "--port",
        str(origin),
        stdout=asyncio.subprocess.PIPE,
        env={**ENV, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert demo.stdout is not None
        async with asyncio.timeout(30):
            while b"Running on" not in (line := await demo.stdout.readline()):
                assert line, "the demo origin exited"
        nodes.append(await Node.start(config))
        ran = await asyncio.to_thread(
            subprocess.run,
            ["bash", "-eu", "-c", script],
            cwd=tmp_path,
            env=ENV,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        demo.terminate()
        await demo.communicate()
    assert ran.returncode == 0, ran.stderr

    [admin] = [line for line in shell_lines() if line.startswith(".venv/bin/cdn-proxy admin")]
    argv = admin.replace(".venv/bin/cdn-proxy", f"{sys.executable} -m proxy")
    argv = argv.replace("config/proxy.toml", str(config))
    password = "correct horse battery"
    status, typed = await asyncio.to_thread(
        _typed_on_a_terminal, argv.split(), [("Password: ", password), ("Again: ", password)]
    )
    assert status == 0, typed
    listed = await cli("admin", "list", "--config", str(config))
    assert listed[0] == 0 and "alice" in listed[1], listed
    expected = [
        line.removeprefix("#   ").split("<-")[0].strip()
        for line in script.splitlines()
        if line.startswith("#   ")
    ]
    assert expected[:3] == [
        "Cache-Status: cdn-proxy; fwd=uri-miss; stored",
        "Cache-Status: cdn-proxy; hit",
        "Cache cleared",
    ]
    at = 0
    for text in expected:
        found = ran.stdout.find(text, at)
        assert found >= 0, f"{text!r} not in what the commands printed:\n{ran.stdout}"
        at = found + len(text)


@pytest.mark.slow
def test_the_glossary_defines_each_word_that_carries_state() -> None:
    """Issue 34: docs/architecture.md defines the words the code and the docs lean on."""
    page = PAGES[ROOT / "docs" / "architecture.md"]
    # The glossary's own list: up to its first subsection (the shared tier's counters).
    glossary = re.split(r"^#{2,3} ", page.split("## Glossary", 1)[1], flags=re.MULTILINE)[0]
    defined = re.findall(r"^- \*\*(.+?)\.\*\*", glossary, flags=re.MULTILINE)
    words = ["Generation", "Purge number", "Mark", "Epoch", "Floor", "Fence", "Lease"]
    assert sorted(defined) == sorted(words)
