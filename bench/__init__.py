"""Benchmarks: the harness (run.py and what it runs, compare.py, sustainable.py, recovery_lag.py,
loops.py; bench/README.md) and, under experiments/, one-off studies."""
