"""Benchmarks: the scripts in bench/ (run.py, capacity.py, sustainable.py, recovery_lag.py, ...)
are the entry points; harness/ is what they are built of, peers/ the systems they run,
experiments/ one-off studies (bench/README.md)."""
