"""Moved to bench/harness/common.py: this name stays only for bench/peers/, until it imports
it from there."""

from bench.harness.common import ms as ms
