"""Moved to bench/harness/venvs.py: this name stays only for bench/peers/, until it imports it
from there."""

from bench.harness.venvs import cached_venv as cached_venv
