"""Pipelines the harness runs with ``--pipeline bench/pipelines/<file>.py``."""
