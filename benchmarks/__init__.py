"""Throughput and latency benchmarks: ``scripts/bench`` runs ``python -m benchmarks.run``."""
