"""Classify a run of the HTTP caching test suite (cache-tests.fyi) with the suite's own rules.

The suite's command-line client prints ``{test id: result}``, where a result is ``true``, or a
``[kind, message]`` pair for a failure. Its web page turns each result into a class using the
test's ``kind`` and ``depends_on``; this module applies the same rules (the suite's
``determineTestResult``) so CI can count them:

- a test whose dependency did not pass (or answer "yes") is a dependency failure;
- ``["Setup", ...]`` is a setup failure (``"retry"`` as the message: a retry);
- otherwise, by kind: required → pass / fail, optimal → pass / optional fail,
  check → yes / no.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PASS_CLASSES = frozenset({"pass", "yes"})


@dataclass(frozen=True)
class TestInfo:
    suite: str
    suite_name: str
    id: str
    name: str
    kind: str
    depends_on: tuple[str, ...]


@dataclass(frozen=True)
class Classified:
    test: TestInfo
    outcome: str  # pass, fail, optional_fail, yes, no, setup_fail, retry, dependency_fail, untested
    message: str


def load_tests(rows: Sequence[Mapping[str, Any]]) -> dict[str, TestInfo]:
    return {
        row["id"]: TestInfo(
            suite=row["suite"],
            suite_name=row["suite_name"],
            id=row["id"],
            name=row["name"],
            kind=row["kind"] or "required",
            depends_on=tuple(row["depends_on"]),
        )
        for row in rows
    }


def outcome(tests: Mapping[str, TestInfo], results: Mapping[str, Any], test_id: str) -> str:
    test = tests[test_id]
    if test_id not in results:
        return "untested"
    result = results[test_id]
    for dependency in test.depends_on:
        if outcome(tests, results, dependency) not in PASS_CLASSES:
            return "dependency_fail"
    if isinstance(result, list) and result and result[0] == "Setup":
        return "retry" if result[1:] == ["retry"] else "setup_fail"
    passed = result is True
    if test.kind == "required":
        return "pass" if passed else "fail"
    if test.kind == "optimal":
        return "pass" if passed else "optional_fail"
    if test.kind == "check":
        return "yes" if passed else "no"
    raise ValueError(f"unknown test kind {test.kind!r} for {test_id}")


def classify(tests: Mapping[str, TestInfo], results: Mapping[str, Any]) -> list[Classified]:
    out = []
    for test_id, test in tests.items():
        result = results.get(test_id)
        message = result[1] if isinstance(result, list) and len(result) > 1 else ""
        out.append(Classified(test, outcome(tests, results, test_id), str(message)))
    return out


def counts(classified: Sequence[Classified]) -> Counter[str]:
    return Counter(c.outcome for c in classified)
