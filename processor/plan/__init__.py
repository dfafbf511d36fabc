"""The planner: a pipeline's graph split into stages (stages.py), and a pipeline loaded from a
user's file (load.py)."""
