"""Optimistic-lock retries (``core/retry.py``): the back-off sleeps with no lock held."""

from __future__ import annotations

import threading

import pytest
from django.test import override_settings

from django_sequences.core import retry
from django_sequences.exceptions import WriteContention
from django_sequences.sources.connections import on_private, private_connection, resolve_alias
from django_sequences.sources.rows import contended

pytestmark = pytest.mark.django_db(transaction=True)


def _free_elsewhere(lock: object) -> bool:
    """Whether another thread can take ``lock`` now."""
    got: list[bool] = []

    def probe() -> None:
        ok = lock.acquire(blocking=False)  # type: ignore[attr-defined]
        if ok:
            lock.release()  # type: ignore[attr-defined]
        got.append(ok)

    t = threading.Thread(target=probe)
    t.start()
    t.join()
    return got[0]


def test_regression_a_lease_retry_slept_holding_the_private_connection_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lost optimistic-lock race slept its back-off inside the private connection's lock,
    stalling every other sequence's lease in the process meanwhile."""
    alias = resolve_alias(None)
    lock = private_connection(alias).lock
    tries: list[int] = []
    free_while_sleeping: list[bool] = []

    def attempt() -> tuple[int, int] | None:
        def once(w: object) -> tuple[int, int] | None:
            tries.append(1)
            return None if len(tries) < 3 else (1, 1)

        return on_private(alias, "k", once)

    def sleep(seconds: float) -> None:
        free_while_sleeping.append(_free_elsewhere(lock))

    monkeypatch.setattr(retry.time, "sleep", sleep)
    assert contended("k", attempt) == (1, 1)
    assert len(tries) == 3
    assert free_while_sleeping == [True, True]


@override_settings(DJANGO_SEQUENCES={"WRITE_RETRIES": 4, "WRITE_BACKOFF": 0.0})
def test_contention_is_raised_after_the_retries() -> None:
    calls: list[int] = []

    def attempt() -> None:
        calls.append(1)
        return None

    with pytest.raises(WriteContention):
        contended("k", attempt)
    assert len(calls) == 4


def test_the_back_off_grows_and_is_capped() -> None:
    assert all(0 <= retry.delay(1, 0.01) <= 0.02 for _ in range(100))
    assert all(0 <= retry.delay(20, 0.01) <= 0.01 * 2**retry.CAP_EXPONENT for _ in range(100))
    assert max(retry.delay(20, 0.01) for _ in range(200)) > 0.02  # grew past the first bound
