"""The HTTP caching test suite behind cache-tests.fyi, run against cdn-proxy in every CI run.

Its results are classified with the suite's own rules (``classify.py``). CI fails when:

- a required test fails that is not in the recorded baseline (``baseline.json``), or the
  number of required failures rises above it;
- any required test fails in the suites on response directives, Authorization, Vary and
  invalidation (none is allowed there);
- fewer required tests pass than the baseline records.

docs/conformance.md explains every failure in the baseline.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance.classify import Classified, classify, counts, load_tests
from tests.conformance.suite import metadata, run_suite, suite_dir, suite_version

# slow: the whole HTTP caching test suite; not in the quick subset (README)
pytestmark = pytest.mark.slow

BASELINE = Path(__file__).with_name("baseline.json")
# Suites where no required failure is acceptable (issue 3): response directives,
# Authorization, Vary (and its parsing) and invalidation.
STRICT_SUITES = frozenset({"cc-response", "auth", "vary", "vary-parse", "invalidation"})


@pytest.fixture(scope="module")
def classified(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Classified]]:
    directory = suite_dir()
    assert (directory / "cli.mjs").is_file(), (
        f"http-cache-tests is not installed at {directory}: run ./scripts/test"
    )
    work = tmp_path_factory.mktemp("cache-tests")
    results = run_suite(directory, work)
    classified = classify(load_tests(metadata(directory)), results)
    report = os.environ.get("CONFORMANCE_REPORT")  # where to keep a summary of this run
    if report:
        Path(report).write_text(
            json.dumps(
                {
                    "suite_version": suite_version(directory),
                    "counts": dict(counts(classified)),
                    "failures": {
                        c.test.id: [c.outcome, c.test.suite, c.message]
                        for c in classified
                        if c.outcome not in ("pass", "yes", "no", "untested")
                    },
                    "results": results,
                },
                indent=2,
            )
        )
    yield classified


def _baseline() -> dict[str, object]:
    data: dict[str, object] = json.loads(BASELINE.read_text())
    return data


def _required_failures(classified: list[Classified]) -> dict[str, Classified]:
    return {c.test.id: c for c in classified if c.outcome == "fail"}


def _describe(failures: dict[str, Classified]) -> str:
    return "\n".join(
        f"  {c.test.suite} / {c.test.id}: {c.test.name} ({c.message})" for c in failures.values()
    )


def test_the_suite_ran_every_test(classified: list[Classified]) -> None:
    tally = counts(classified)
    ran = sum(n for outcome, n in tally.items() if outcome != "untested")
    # Only the suite's browser-only tests go untested against a proxy.
    assert ran > 300, tally
    assert tally["untested"] <= 10, tally


def test_required_failures_do_not_rise_above_the_baseline(
    classified: list[Classified],
) -> None:
    baseline = _baseline()
    version = suite_version(suite_dir())
    if version != baseline["suite_version"]:
        pytest.fail(f"baseline is for http-cache-tests {baseline['suite_version']}, ran {version}")
    allowed = set(baseline["required_failures"])  # type: ignore[call-overload]
    failures = _required_failures(classified)
    new = {test_id: c for test_id, c in failures.items() if test_id not in allowed}
    assert not new, "required tests failing that the baseline does not allow:\n" + _describe(new)
    assert len(failures) <= len(allowed)


def test_no_required_failure_in_the_strict_suites(classified: list[Classified]) -> None:
    strict = {
        test_id: c
        for test_id, c in _required_failures(classified).items()
        if c.test.suite in STRICT_SUITES
    }
    assert not strict, "required failures in strict suites:\n" + _describe(strict)


def test_passes_do_not_fall_below_the_baseline(classified: list[Classified]) -> None:
    minimum = _baseline()["min_passes"]
    assert isinstance(minimum, int)
    assert counts(classified)["pass"] >= minimum
