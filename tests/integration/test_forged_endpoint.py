"""A forged ``endpoint`` record on a running job's control topic (issue 41, item 2).

A word count with queryable state, behind a token, and two servers of the test's own on
loopback. The test writes ``endpoint`` records to ``<job>.control``: one for a worker id
that is not alive (pointing at the first server), one for the live worker (pointing at the
second, a loopback address the default PROCESSOR_STATE_API_WORKERS allows). Meanwhile it
reads a key through the coordinator. Before the fix the coordinator forwarded the caller's
``Authorization: Bearer <token>`` to the forged URL and answered that server's HTML page.

Now: the first server receives nothing; the second receives requests with no credential of
the caller's (nor ``?token=``); every answer of the coordinator is JSON; the worker's next
announcement restores its own URL, so reads answer 200 again.
"""

from __future__ import annotations

import http.server
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from processor.commands.state import get
from tests.integration.harness import JobRun, wait_until
from tests.integration.test_query_state import _free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

TOKEN = "the-callers-token"
PAGE = b"<script>steal(document.cookie)</script>"


class Attacker:
    """An HTTP server on loopback that records each request and answers an HTML page."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        seen = self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append((self.path, dict(self.headers.items())))
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(PAGE)))
                self.end_headers()
                self.wfile.write(PAGE)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def attackers() -> Iterator[tuple[Attacker, Attacker]]:
    pair = (Attacker(), Attacker())
    yield pair
    for attacker in pair:
        attacker.close()


def _ask(url: str) -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


def test_a_forged_endpoint_gets_no_credential_and_the_answers_stay_json(
    kafka_bootstrap: str, tmp_path: Path, attackers: tuple[Attacker, Attacker]
) -> None:
    ghost_target, live_target = attackers
    run = JobRun(
        kafka_bootstrap,
        tmp_path,
        input_partitions=2,
        interval_ms=300,
        state_api="on",
        shuffle_partitions="4",
        api_token=TOKEN,
    )
    port = _free_port()
    coordinator = f"http://127.0.0.1:{port}"
    try:
        run.start_coordinator(exit_when_idle=False, metrics_port=port)
        run.start_worker(0, metrics_port=_free_port())
        run.produce([b"apple apple pear"])
        wait_until(
            lambda: get([coordinator], "counts", "apple", token=TOKEN, retry_s=0).status == 200,
            90,
            "a value through the coordinator",
        )
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        for worker, target in [("ghost", ghost_target), ("worker-0", live_target)]:
            forged = b'{"kind":"endpoint","worker":"%s","url":"%s"}' % (
                worker.encode(),
                target.url.encode(),
            )
            producer.produce(run.settings.control_topic, forged)
        producer.flush(30)
        answers = []
        deadline = time.monotonic() + 6  # the worker announces itself every 10 heartbeats
        while time.monotonic() < deadline:
            answers.append(_ask(f"{coordinator}/state/counts/apple?token={TOKEN}"))
            time.sleep(0.05)
        assert ghost_target.seen == []
        assert live_target.seen, "the live worker's forged URL was never used: no test"
        for path, headers in live_target.seen:
            assert TOKEN not in path and TOKEN not in repr(headers), (path, headers)
            assert "Authorization" not in headers
        statuses = {status for status, _, _ in answers}
        assert {content_type for _, content_type, _ in answers} == {"application/json"}
        assert all(PAGE not in body for _, _, body in answers)
        assert 502 in statuses and answers[-1][0] == 200, statuses  # then its own URL again
        assert "worker 'ghost' is not alive" in run.log("coordinator")
    finally:
        run.stop()
