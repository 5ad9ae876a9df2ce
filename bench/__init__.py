"""Benchmarks: the price of exactly-once, measured side by side (``make bench``; see docs/BENCHMARKS.md)."""
