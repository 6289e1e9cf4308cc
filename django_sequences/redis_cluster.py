"""Redis Cluster for the redis strategies, through django-redis.

django-redis has no cluster client of its own. This connection factory hands its default
client a redis-py ``RedisCluster`` instead of a ``Redis``, which routes each command (and each
script, by its key) to the master holding that key's hash slot, and follows the cluster when a
replica is promoted::

    CACHES = {
        "sequences": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://node1.internal:7000/0",  # any node; the rest are discovered
            "OPTIONS": {
                "CONNECTION_FACTORY": "django_sequences.redis_cluster.ClusterConnectionFactory",
                "SOCKET_CONNECT_TIMEOUT": 1,
                "SOCKET_TIMEOUT": 2,
            },
        },
    }
    DJANGO_SEQUENCES = {"REDIS_ALIAS": "sequences"}

Every script of the redis strategies touches one key (the ``redis`` counter, the
``redis_segment`` window) or keys sharing one hash tag (the worker-id claims of one sequence,
``…workers:{name}:…``), so a cluster never refuses one with ``CROSSSLOT``. Use this alias for
the sequences only: django-redis's cache operations over several keys (``get_many``,
``delete_pattern``) are not cluster-aware. See docs/scaling.md.
"""

from __future__ import annotations

from typing import Any

from django_redis.pool import ConnectionFactory


class ClusterConnectionFactory(ConnectionFactory):
    """A django-redis connection factory whose connections are redis-py ``RedisCluster``
    clients (one per ``LOCATION``, shared by the process's threads)."""

    def connect(self, url: str) -> Any:
        from redis.cluster import RedisCluster

        params = self.make_connection_params(url)
        return RedisCluster.from_url(
            url,
            socket_timeout=params.get("socket_timeout"),
            socket_connect_timeout=params.get("socket_connect_timeout"),
        )
