"""The concurrency test of reservations: 4 processes (2 forked, 2 spawned) x 4 threads
reserve, confirm (alone, or inside a business transaction that commits or rolls back), void and
abandon (let expire, short ttl) numbers of a ``reuse`` and a ``keep`` sequence at random; one
forked process is killed with SIGKILL mid-run.

Afterwards the series **settles**: :func:`reservations.expire` runs at a time past every
reservation's ``expires_at`` (so nothing is left ``reserved``), then, for the ``reuse`` series,
every voided or expired number is reserved again and confirmed (as many reservations as there
are such numbers; each one must be a number taken over, not a fresh value). Then the audit:

- every value from the first to the counter's last is accounted for exactly once (one
  reservation row each, no gap: the killed process's transaction rolled back its value and
  its reservation together);
- no number was confirmed twice: the audit's duplicates are empty, and no two successful
  ``confirm()`` calls of the workers (logged line by line as they return, so the killed one's
  count too) named the same value;
- every confirm a worker saw succeed is ``confirmed`` in the audit (keep) or was confirmed in
  the history (reuse: a confirmed number is never taken over);
- the ``reuse`` series, settled, is all ``confirmed``: no gap among its confirmed numbers.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support import processes as workers

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

NAMES = ("conc_reuse", "conc_keep")
THREADS = 4
#: seconds the workers run at least, and a short and a long ttl (an abandoned reservation
#: expires)
RUN = 5.0
#: each surviving thread goes on past ``RUN`` until it has confirmed this many numbers and
#: voided and abandoned one at least, so a busy machine changes how long the test runs, never
#: what it checks
MIN_CONFIRMED = 3
SHORT_TTL, LONG_TTL = 0.3, 20.0


def reserve_loop(names: tuple[str, ...], seed: int, until: float, log_path: str) -> None:
    """One process's work: ``THREADS`` threads reserving, confirming, voiding and abandoning
    until ``until`` (wall clock) has passed and each thread has done its share of every kind
    of step (``MIN_CONFIRMED``), each step that succeeded logged as one line (one
    ``os.write`` on an O_APPEND file, so a killed process has logged all it saw succeed)."""
    # after django.setup() in a spawned child (a forked one inherits it): the models need it
    from django.db import transaction

    from django_sequences import reservations
    from django_sequences.exceptions import ReservationExpired, ReservationSettled

    class RolledBack(Exception):
        pass

    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def log(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    def work(k: int) -> None:
        rnd = random.Random(seed * 100 + k)
        done = {"C": 0, "V": 0, "A": 0, "X": 0, "E": 0}

        def note(line: str) -> None:
            done[line[0]] += 1
            log(line)

        def enough() -> bool:
            # an error ends the thread: the test fails on it, it need not wait for more
            complete = done["C"] >= MIN_CONFIRMED and done["V"] >= 1 and done["A"] >= 1
            return complete or done["E"] > 0

        while time.time() < until or not enough():
            name = rnd.choice(names)
            try:
                r = reservations.reserve_number(
                    name, ttl=rnd.choice((SHORT_TTL, LONG_TTL)), actor=f"{os.getpid()}/{k}"
                )
                time.sleep(rnd.random() * 0.01)  # the business transaction
                action = rnd.random()
                if action < 0.25:
                    r.confirm()
                    note(f"C {name} {r.value} {r.attempt}")
                elif action < 0.4:  # confirmed in the business transaction, committed
                    with transaction.atomic():
                        r.confirm()
                    note(f"C {name} {r.value} {r.attempt}")
                elif action < 0.5:  # confirmed in one that rolls back: it stays reserved
                    try:
                        with transaction.atomic():
                            r.confirm()
                            raise RolledBack
                    except RolledBack:
                        note(f"A {name} {r.value} {r.attempt}")
                elif action < 0.75:
                    r.void(f"void {k}")
                    note(f"V {name} {r.value} {r.attempt}")
                else:
                    note(f"A {name} {r.value} {r.attempt}")  # abandoned: it expires
            except (ReservationExpired, ReservationSettled) as exc:
                note(f"X {name} {type(exc).__name__}")
            except BaseException as exc:
                note(f"E {name} {exc!r}".replace("\n", " "))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    os.close(fd)


def spawned_loop(
    db_env: dict[str, str], db_name: str, seed: int, until: float, log_path: str
) -> None:
    workers.setup_django(db_env, db_name)
    reserve_loop(NAMES, seed, until, log_path)


def forked_loop(seed: int, until: float, log_path: str) -> None:
    reserve_loop(NAMES, seed, until, log_path)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_four_processes_one_killed_every_number_accounted_once(tmp_path: Path) -> None:
    # test-time imports: spawned children import this module before django.setup()
    from django.db import connection
    from django.utils import timezone

    from django_sequences import reservations
    from django_sequences.models import Reservation, ReservationEvent, Segment, Sequence

    Sequence.objects.define("conc_reuse", strategy="strict", template="R{seq:06}", voided="reuse")
    Sequence.objects.define("conc_keep", strategy="strict", template="K{seq:06}")
    start = time.time() + 4.0  # the spawned children set Django up meanwhile
    until = start + RUN
    logs = [str(tmp_path / f"p{i}.log") for i in range(4)]
    spawn = multiprocessing.get_context("spawn")
    spawned = [
        spawn.Process(
            target=spawned_loop,
            args=(workers.db_env(), connection.settings_dict["NAME"], i, until, logs[i]),
        )
        for i in (2, 3)
    ]
    for p in spawned:
        p.start()
    connection.close()  # the forked children must not share the parent's connection
    fork = multiprocessing.get_context("fork")
    time.sleep(max(0.0, start - time.time()))
    forked = [fork.Process(target=forked_loop, args=(i, until, logs[i])) for i in (0, 1)]
    for f in forked:
        f.start()
    # killed mid-run, once it has logged work (a fixed sleep could come before a busy
    # machine let it reserve anything)
    time.sleep(RUN / 2)
    while not Path(logs[0]).exists() or not Path(logs[0]).read_text():
        assert forked[0].is_alive(), "the forked worker ended before it logged anything"
        time.sleep(0.05)
    assert forked[0].pid is not None
    os.kill(forked[0].pid, signal.SIGKILL)
    every: list[Any] = [*forked, *spawned]
    for proc in every:
        proc.join(300)
        assert not proc.is_alive()
    assert forked[0].exitcode == -signal.SIGKILL
    assert [proc.exitcode for proc in every[1:]] == [0, 0, 0]

    texts = [Path(path).read_text() for path in logs if os.path.exists(path)]
    lines = [line.split() for text in texts for line in text.splitlines()]
    errors = [" ".join(line) for line in lines if line[0] == "E"]
    assert not errors, errors[:5]
    confirmed = [(line[1], int(line[2])) for line in lines if line[0] == "C"]
    assert len(confirmed) == len(set(confirmed)), "a value was confirmed twice"
    assert {line[0] for line in lines} >= {"C", "V", "A"}
    # the three survivors' threads each confirmed their share (the killed one's add to it)
    assert len(confirmed) >= 3 * THREADS * MIN_CONFIRMED
    assert Path(logs[0]).read_text(), "the killed process had done nothing yet"

    # settle: nothing left reserved (a time past every expiry), then reuse every number
    later = timezone.now() + timedelta(seconds=LONG_TTL + 60)
    reservations.expire(now=later)
    assert not Reservation.objects.filter(state="reserved").exists()
    assert reservations.expire(now=later) == 0
    reusable = Reservation.objects.filter(sequence="conc_reuse", state__in=("voided", "expired"))
    assert reusable.exists()
    for _ in range(reusable.count()):
        r = reservations.reserve_number("conc_reuse", ttl=LONG_TTL)
        assert r.attempt > 1, f"{r.number} is a fresh value while numbers wait for reuse"
        r.confirm()
    assert not reusable.exists()

    for name in NAMES:
        found = reservations.audit(name)
        last = Segment.objects.get(key=name).value
        assert found.keys == [name]
        assert found.gaps == [] and found.duplicates == []
        # every value from 1 to the counter's last, exactly once
        assert [n.value for n in found.numbers] == list(range(1, last + 1))
        assert len({n.number for n in found.numbers}) == last
        states = {n.value: n.state for n in found.numbers}
        seen = {v for n, v in confirmed if n == name}
        if name == "conc_reuse":
            assert found.states == {"confirmed": last}  # settled: no gap among confirmed
        else:
            assert all(states[v] == "confirmed" for v in seen)
            assert set(found.states) == {"confirmed", "voided", "expired"}
            # every number not confirmed is explained by its void or expiry
            explained = {v.value for v in found.voids}
            assert {v for v, s in states.items() if s != "confirmed"} == explained
        # a confirm is final: each value has at most one confirmed event in its history
        events = ReservationEvent.objects.filter(
            reservation__sequence=name, state="confirmed"
        ).values_list("reservation_id", flat=True)
        assert len(list(events)) == len(set(events))
