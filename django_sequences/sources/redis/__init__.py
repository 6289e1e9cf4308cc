"""Redis, for every strategy that uses it:

* ``connection.py``: the django-redis client of a cache alias, keys, Lua scripts, the error
  mapping (every Redis-backed store goes through it).
* ``counters.py``: the ``redis`` strategy's counter keys and the ``redis_segment`` window.
* ``seconds.py``: the per-second counters of the ``timestamp`` strategy (``counter="redis"``).

Worker-id claims kept in Redis are with the other worker-id claims, ``sources/workers/redis.py``;
the Redis Cluster connection factory is ``django_sequences/redis_cluster.py``.
"""
