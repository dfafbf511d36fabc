"""Kafka Streams' own exactly-once system test (streams_eos_test.py with EosTestDriver and
EosTestClient), ported to this project: the topology (`pipeline`), an idempotent input
driver (`driver`), an independent read_committed verifier (`verify`) and a runner that
bounces workers cleanly and with SIGKILL on a three-broker cluster (``python -m tests.eos``).
"""
