"""``cdn-proxy completion bash`` (issue 34 §4): the script, sourced in a real bash, completes
the commands, their actions and options, and files after ``--config``; generated from the
parser, it lists every command the parser has (but the internal ``worker``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.cli.completion import _subcommands
from proxy.cli.main import _parser, main

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="no bash here")


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "cdn-proxy.bash"
    text = subprocess.run(
        [sys.executable, "-m", "proxy", "completion", "bash"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    path.write_text(text, encoding="utf-8")
    return path


def complete(script: Path, line: str, cwd: Path | None = None) -> list[str]:
    """What bash offers for the last word of ``line`` (empty when it ends with a space)."""
    words = line.split(" ")
    program = (
        f"source {script}\n"
        f"COMP_WORDS=({' '.join(repr(word) for word in words)})\n"
        f"COMP_CWORD={len(words) - 1}\n"
        "_cdn_proxy\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    assert BASH is not None
    done = subprocess.run(
        [BASH, "--norc", "--noprofile", "-c", program],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
    )
    return sorted(line for line in done.stdout.splitlines() if line)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("line", "offered"),
    [
        ("cdn-proxy t", ["token", "trace"]),
        ("cdn-proxy token ", ["create", "list", "regenerate", "revoke"]),
        ("cdn-proxy token create --", ["--all-domains", "--config", "--domain", "--help"]),
        ("cdn-proxy config ", ["check"]),
        ("cdn-proxy purge --d", ["--dry-run"]),
        ("cdn-proxy completion ", ["bash"]),
    ],
)
def test_commands_actions_and_options_complete(script: Path, line: str, offered: list[str]) -> None:
    assert complete(script, line) == offered


def test_files_complete_after_config(script: Path, tmp_path: Path) -> None:
    (tmp_path / "proxy.toml").write_text("", encoding="utf-8")
    (tmp_path / "other.txt").write_text("", encoding="utf-8")
    assert complete(script, "cdn-proxy serve --config pro", cwd=tmp_path) == ["proxy.toml"]
    assert complete(script, "cdn-proxy config check pr", cwd=tmp_path) == ["proxy.toml"]


@pytest.mark.slow
def test_every_command_of_the_parser_is_offered(
    script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    names = sorted(_subcommands(_parser()))
    assert "worker" not in names and {"serve", "config", "completion"} <= set(names)
    assert [word for word in complete(script, "cdn-proxy ") if not word.startswith("-")] == names
    assert main(["completion", "bash"]) == 0
    assert capsys.readouterr().out == script.read_text(encoding="utf-8")
