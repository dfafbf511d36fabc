"""Benchmarks: recovery after SIGKILL (recovery.py) and the comparison with peers (run.py)."""
