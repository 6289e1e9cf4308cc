"""The test project's Celery app: ``celery -A testproject worker`` (and ``beat``).

Broker and result backend: ``CELERY_BROKER_URL`` (default Redis db 1 at 127.0.0.1:6379; a
RabbitMQ URL such as ``amqp://guest:guest@127.0.0.1:5672//`` works too) and
``CELERY_RESULT_BACKEND`` (default: the broker when it is Redis). ``CELERY_TASK_DEFAULT_QUEUE``
names the queue the worker consumes and messages go to by default. The beat schedule is
``django_sequences.tasks.beat_schedule()``.

``DJANGO_SEQUENCES_TEST_DB_NAME`` points the default database at another name before Django
connects: the tests start workers on pytest-django's test database with it.
"""

from __future__ import annotations

import os

from celery import Celery  # type: ignore[import-untyped]

from django_sequences.tasks import beat_schedule

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

_test_db = os.environ.get("DJANGO_SEQUENCES_TEST_DB_NAME")
if _test_db:
    from django.conf import settings

    settings.DATABASES["default"]["NAME"] = _test_db

_broker = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/1")
_default_backend = _broker if _broker.startswith(("redis://", "rediss://")) else None

app = Celery("testproject")
app.conf.update(
    broker_url=_broker,
    result_backend=os.environ.get("CELERY_RESULT_BACKEND", _default_backend),
    result_expires=3600,
    task_default_queue=os.environ.get("CELERY_TASK_DEFAULT_QUEUE", "celery"),
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    timezone="UTC",
    beat_schedule=beat_schedule(),
    broker_connection_retry_on_startup=True,
)
app.autodiscover_tasks()


@app.task(name="testproject.next_value")
def issue_value(name: str) -> int:
    """The next value of sequence ``name``, issued in the worker (a demo task; the tests use it
    to make a worker process hold a worker-id lease)."""
    from django_sequences import next_value

    return next_value(name)
