"""``processor kafka start|stop|status``: the local Kafka broker, or a cluster
(`processor.localkafka.cluster` parses its own arguments)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """None here: `main` takes the rest of the command line as it is."""


def main(argv: list[str]) -> int:
    from processor.localkafka import cluster

    return cluster.main(argv)


def run(args: argparse.Namespace) -> int:
    raise AssertionError("processor kafka is run by main(), before the command line is parsed")
