"""``processor worker``: a worker, running the tasks the coordinator assigns it, until
SIGTERM/SIGINT."""

from __future__ import annotations

import argparse

from processor.commands import base


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """Settings only."""


def run(args: argparse.Namespace) -> int:
    from processor import metrics
    from processor.worker.service import Worker

    settings = base.setup(args)
    worker = Worker(settings)
    token = settings.api_token.get_secret_value()
    port, host, names = settings.metrics_port, settings.metrics_host, settings.http_host_names
    routes = worker.state_routes()
    metrics.serve(port, host, worker.health, worker.worker_id, token, routes, names)
    worker.run(base.stop_event())
    return 0
