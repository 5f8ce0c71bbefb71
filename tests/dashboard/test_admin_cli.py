"""``cdn-proxy admin``: create, list, remove and set-password on a real state file."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import pytest
from argon2 import PasswordHasher

from proxy.cli.main import main
from proxy.state.sqlite import StateDB
from tests.api.support import table_rows, write_cli_config

PASSWORD = "a long enough password"


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    return write_cli_config(tmp_path)


def run(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *args: str,
    stdin: str = "",
    tty: bool = False,
) -> tuple[int, str, str]:
    stream = io.StringIO(stdin)
    stream.isatty = lambda: tty  # type: ignore[method-assign]
    monkeypatch.setattr("sys.stdin", stream)
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def stored_hash(config_file: Path, name: str) -> str | None:
    with StateDB(config_file.parent / "var" / "state.db") as db:
        return db.admins.password_hash(name)


@pytest.mark.slow
def test_create_stores_an_argon2id_hash_of_the_password_from_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    code, out, err = run(
        monkeypatch,
        capsys,
        "admin",
        "create",
        "alice",
        "--password-stdin",
        "--config",
        str(config_file),
        stdin=PASSWORD + "\n",
    )
    assert (code, out, err) == (0, "created admin 'alice'\n", "")
    stored = stored_hash(config_file, "alice")
    assert stored is not None
    assert stored.startswith("$argon2id$v=19$m=65536,t=3,p=4$")
    assert PasswordHasher().verify(stored, PASSWORD)  # the newline was not part of it
    with sqlite3.connect(config_file.parent / "var" / "state.db") as db:
        assert PASSWORD not in "\n".join(db.iterdump())


@pytest.mark.slow
def test_list_shows_admins_and_no_hashes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    for name in ("bob", "alice"):
        run(monkeypatch, capsys, "admin", "create", name, "--password-stdin", "--config",
            str(config_file), stdin=PASSWORD)  # fmt: skip
    code, out, _ = run(monkeypatch, capsys, "admin", "list", "--config", str(config_file))
    assert code == 0
    alice, bob = table_rows(out)
    assert alice.keys() == {"NAME", "CREATED", "PASSWORD SET", "LAST SIGN-IN"}
    assert (alice["NAME"], alice["LAST SIGN-IN"]) == ("alice", "never")
    assert (bob["NAME"], bob["LAST SIGN-IN"]) == ("bob", "never")
    assert alice["PASSWORD SET"] == alice["CREATED"] != "never"
    assert "$argon2" not in out


@pytest.mark.slow
def test_set_password_replaces_the_hash_and_ends_sessions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    config = str(config_file)
    run(monkeypatch, capsys, "admin", "create", "alice", "--password-stdin", "--config", config,
        stdin=PASSWORD)  # fmt: skip
    before = stored_hash(config_file, "alice")
    assert before is not None
    with StateDB(config_file.parent / "var" / "state.db") as db:
        assert db.admins.start_session("d" * 64, "alice", before, 0.0)
    code, out, _ = run(monkeypatch, capsys, "admin", "set-password", "alice", "--password-stdin",
                       "--config", config, stdin="another long password\r\n")  # fmt: skip
    assert code == 0
    assert "their sessions have ended" in out
    after = stored_hash(config_file, "alice")
    assert after is not None and after != before
    assert PasswordHasher().verify(after, "another long password")
    with StateDB(config_file.parent / "var" / "state.db") as db:
        assert db.admins.session("d" * 64) is None


@pytest.mark.slow
def test_remove(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    config = str(config_file)
    run(monkeypatch, capsys, "admin", "create", "alice", "--password-stdin", "--config", config,
        stdin=PASSWORD)  # fmt: skip
    code, out, _ = run(monkeypatch, capsys, "admin", "remove", "alice", "--config", config)
    assert (code, out) == (0, "removed admin 'alice'; their sessions have ended\n")
    assert stored_hash(config_file, "alice") is None


def test_a_terminal_is_asked_twice(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], config_file: Path
) -> None:
    answers = iter([PASSWORD, PASSWORD])
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(answers))
    code, _, _ = run(monkeypatch, capsys, "admin", "create", "alice", "--config",
                     str(config_file), tty=True)  # fmt: skip
    assert code == 0
    assert stored_hash(config_file, "alice") is not None

    answers = iter([PASSWORD, "something else entirely"])
    code, _, err = run(monkeypatch, capsys, "admin", "create", "bob", "--config",
                       str(config_file), tty=True)  # fmt: skip
    assert (code, err) == (2, "cdn-proxy: the passwords differ\n")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "stdin", "code", "message"),
    [
        (["create", "alice", "--password-stdin"], "short\n", 2, "at least 12 characters"),
        (["create", "alice", "--password-stdin"], "two\nlines of password\n", 2, "one line"),
        (["create", "alice", "--password-stdin"], "x" * 1025, 2, "at most 1024"),
        (["create", "alice"], PASSWORD, 2, "pass --password-stdin"),
        (["create", "bad name", "--password-stdin"], PASSWORD, 2, "bad admin name"),
        (["create", "taken", "--password-stdin"], PASSWORD, 1, "already exists"),
        (["remove", "nobody"], "", 1, "no admin named 'nobody'"),
        (["set-password", "nobody", "--password-stdin"], PASSWORD, 1, "no admin named"),
    ],
)
def test_mistakes_are_one_line_and_an_exit_code(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    config_file: Path,
    args: list[str],
    stdin: str,
    code: int,
    message: str,
) -> None:
    run(monkeypatch, capsys, "admin", "create", "taken", "--password-stdin", "--config",
        str(config_file), stdin=PASSWORD)  # fmt: skip
    status, out, err = run(
        monkeypatch, capsys, "admin", *args, "--config", str(config_file), stdin=stdin
    )
    assert status == code
    assert out == ""
    assert message in err
    assert len(err.splitlines()) == 1
