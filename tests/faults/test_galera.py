"""A MariaDB Galera cluster, where every node takes writes, through the harness of
benchmarks/promotions.py (scenario ``f``; the cluster is benchmarks/galera.py's).

Three nodes on private loopback ports (free ones, never the shared servers'), run as user
``mysql`` and stopped by pid. One issuing process per node, its ``default`` alias on that node,
2 threads per strategy: segment (step 50), strict, autoincrement (4 tables) and snowflake, with
the library's defaults (the writer guard on). First a reference with the three processes all
on node 1; then steady issuing on every node, node 3 killed -9 and restarted (it rejoins by
IST), node 2 paused (SIGSTOP) 8 s and resumed.

What must hold with the defaults:

- no value twice, and every error a django_sequences exception;
- in the steady phase, segment and strict skip (almost) nothing: the span of the values
  (largest - smallest + 1) is at most 1 % above the values acknowledged in it, plus one step
  per process. "In it": at any time of the run, since a burst of 20 calls still running when
  the phase ended holds values of the span too. A guard that took every node of one cluster
  for a new writer would move the counters ahead on most leases and skip far more;
- snowflake: every process gets a worker id and issues in the steady phase;
- no certification conflict (error 1213, "Deadlock", "certification") reaches a caller while
  every node is up (1047, "WSREP has not yet prepared node", is a node out of the cluster, not
  a conflict: a resumed node answers it until it is Synced again);
- the processes on the other nodes go on issuing while one node is down, and every process
  issues again once a killed or stopped node is back.

The reference phase is held to the same span and snowflake rules: proof that they can pass
on this machine. Marked ``failover`` (tox runs the harness once); no duration or throughput
is asserted.
"""

from __future__ import annotations

import os
import shutil

import pytest

from benchmarks import galera, promotions

pytestmark = [pytest.mark.slow, pytest.mark.promotion]

#: shorter than the benchmark's defaults (10 s steady, 2 s down, 8 s after); the pause is 8 s
STEADY, DOWN, AFTER, PAUSE = 8.0, 1.0, 5.0, 8.0
SPAN_SLACK = 1.01
SPANNED = ("segment", "strict")


@pytest.fixture(scope="module")
def result() -> promotions.ScenarioResult:
    for need in (galera.PROVIDER, galera.MARIADBD):
        assert os.path.exists(need), f"{need} is not installed: apt-get install galera-4"
    for tool in ("rsync", "mariadb-install-db"):
        assert shutil.which(tool), f"{tool} is not installed"
    opts = promotions.Options(steady=STEADY, lag=DOWN, after=AFTER, pause=PAUSE)
    return promotions.run_scenario("f", opts)


def _figures(res: promotions.ScenarioResult, phase: str) -> dict[str, object]:
    return {
        label: {
            "acknowledged": r.acknowledged,
            "span": r.span,
            "acknowledged_in_span": r.covered,
            "per_process": r.per_process,
            "guard_moves": r.moved_ahead,
            "errors": r.error_codes,
        }
        for label, r in res.phases[phase].items()
    }


def _bound(r: promotions.LabelResult) -> float:
    """The largest span allowed: the values acknowledged in it, 1 % more, one step a process."""
    return SPAN_SLACK * (r.covered or 0) + promotions.step_of(r.label) * promotions.PROCESSES


def _span_ok(r: promotions.LabelResult) -> bool:
    return r.span is not None and r.span <= _bound(r)


@pytest.mark.parametrize("label", promotions.GALERA_LABELS)
def test_no_value_is_issued_twice(result: promotions.ScenarioResult, label: str) -> None:
    assert result.labels[label].acknowledged > 0, _figures(result, "steady")
    assert result.labels[label].duplicates == 0, result.labels[label]
    assert result.phases["reference"][label].duplicates == 0


@pytest.mark.parametrize("label", promotions.GALERA_LABELS)
def test_every_error_is_a_django_sequences_exception(
    result: promotions.ScenarioResult, label: str
) -> None:
    for phase, labels in result.phases.items():
        r = labels[label]
        assert r.untyped == {}, (phase, r.untyped, r.error_samples)


@pytest.mark.parametrize("label", SPANNED)
def test_the_reference_skips_almost_nothing(result: promotions.ScenarioResult, label: str) -> None:
    r = result.phases["reference"][label]
    assert r.acknowledged > 0 and _span_ok(r), _figures(result, "reference")


@pytest.mark.parametrize("label", SPANNED)
def test_every_node_a_writer_skips_almost_nothing(
    result: promotions.ScenarioResult, label: str
) -> None:
    r = result.phases["steady"][label]
    assert r.acknowledged > 0, _figures(result, "steady")
    assert _span_ok(r), (
        f"{label}: span {r.span:,} for {r.covered:,} acknowledged in it (at most "
        f"{_bound(r):,.0f}); {r.moved_ahead} guard moves; {_figures(result, 'steady')}"
    )


@pytest.mark.parametrize("phase", ["reference", "steady"])
def test_snowflake_every_process_issues(result: promotions.ScenarioResult, phase: str) -> None:
    r = result.phases[phase]["snowflake"]
    issued = [r.per_process.get(f"p{i}", 0) for i in range(promotions.PROCESSES)]
    assert all(n > 0 for n in issued), (
        f"{phase}: snowflake values per process {issued}; errors {r.error_codes}; "
        f"{r.moved_ahead} guard moves"
    )


@pytest.mark.parametrize("label", promotions.GALERA_LABELS)
def test_no_certification_conflict_reaches_a_caller(
    result: promotions.ScenarioResult, label: str
) -> None:
    found = {
        phase: (result.phases[phase][label].error_codes, result.phases[phase][label].error_samples)
        for phase in promotions.ALL_UP_PHASES
        if result.phases[phase][label].conflicts
    }
    assert not found, found


@pytest.mark.parametrize("label", promotions.GALERA_LABELS)
def test_issuing_goes_on_around_a_node_that_dies_or_stops(
    result: promotions.ScenarioResult, label: str
) -> None:
    """While node 3 is down, the processes on the other nodes go on issuing; once a node is
    back (rejoined, resumed), every process issues again. (While node 2 is only stopped, the
    cluster may wait for it until it is evicted, the others included: one CI run saw no value
    from any process in that phase, so it is not asserted.)"""
    per = result.phases["node down"][label].per_process
    assert all(per.get(p, 0) > 0 for p in ("p0", "p1")), (label, per)
    for phase in ("rejoined", "resumed"):
        per = result.phases[phase][label].per_process
        assert all(per.get(f"p{i}", 0) > 0 for i in range(promotions.PROCESSES)), (phase, per)
