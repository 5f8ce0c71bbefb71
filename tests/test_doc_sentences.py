"""Short sentences in the README and the docs pages (issue 34 §1: "short, one idea each").

A sentence of the prose counts; code blocks, tables and headings do not. Inline code and a
link's text count as their words, a link's target not at all. The limit is ``LIMIT`` words.
Run it to list the long ones with their line numbers:

    .venv/bin/python -m tests.test_doc_sentences [FILE...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))]
GENERATED = {"config.md"}  # from the config model (proxy/config/reference.py): one line each
LIMIT = 30  # words

_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_END = re.compile(r"(?<=[.!?])[)\"'*]*\s+(?=[A-Z`*(\[\"])")
_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s+")


def paragraphs(text: str) -> list[tuple[int, str]]:
    """The prose: each paragraph or list item joined into one line, with its first line's
    number. Fenced code, tables, headings, HTML and indented continuation of code left out."""
    found: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    fenced = False

    def close() -> None:
        if current:
            found.append((start, " ".join(current)))
            current.clear()

    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("```"):
            close()
            fenced = not fenced
            continue
        if fenced or not stripped or stripped.startswith(("#", "|", "<", ">")):
            close()
            continue
        if _ITEM.match(line):
            close()
            stripped = _ITEM.sub("", line).strip()
        if not current:
            start = number
        current.append(stripped)
    close()
    return found


def sentences(paragraph: str) -> list[str]:
    prose = _LINK.sub(r"\1", paragraph)
    return [part for part in _END.split(prose) if part.strip()]


def words(sentence: str) -> int:
    return len(sentence.split())


def long_sentences(text: str, limit: int = LIMIT) -> list[tuple[int, int, str]]:
    """(line, words, sentence) of every sentence over ``limit`` words."""
    return [
        (line, words(sentence), sentence)
        for line, paragraph in paragraphs(text)
        for sentence in sentences(paragraph)
        if words(sentence) > limit
    ]


def test_the_checker_splits_prose_and_skips_code_and_tables() -> None:
    text = (
        "# A heading of many words that would count if headings were prose at all here\n"
        "One short sentence. Another one, with `code` and [a link](https://example.com/x).\n"
        "\n"
        "```sh\n" + "word " * 40 + "\n```\n"
        "| " + "cell " * 40 + "|\n"
        "- an item of " + "many " * 30 + "words\n"
        "- a short item\n"
    )
    found = long_sentences(text)
    assert [(line, count) for line, count, _ in found] == [(8, 34)]
    assert sentences("It is up. Then `a.b` runs (see [here](x.md)). Done") == [
        "It is up.",
        "Then `a.b` runs (see here).",
        "Done",
    ]


@pytest.mark.parametrize("page", [p for p in PAGES if p.name not in GENERATED], ids=str)
def test_no_sentence_is_over_the_limit(page: Path) -> None:
    found = long_sentences(page.read_text(encoding="utf-8"))
    assert not found, "\n".join(f"{page.name}:{line}: {n} words: {s}" for line, n, s in found)


def main(paths: list[str]) -> int:
    pages = [Path(p) for p in paths] or PAGES
    total = 0
    for page in pages:
        for line, count, sentence in long_sentences(page.read_text(encoding="utf-8")):
            print(f"{page}:{line}: {count} words: {sentence}")
            total += 1
    print(f"{total} sentences over {LIMIT} words")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
