"""Moved to bench/harness/measure.py: this name stays only for bench/peers/ and the Nexmark
scripts, until they import it from there."""

from bench.harness.measure import create_topic as create_topic
from bench.harness.measure import percentile as percentile
from bench.harness.measure import pgroup_members as pgroup_members
