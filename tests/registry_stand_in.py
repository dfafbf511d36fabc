"""A local stand-in of a schema registry's REST API: the calls confluent-kafka's client makes
to register a schema and fetch one by id, answered as Confluent's registry (and Apicurio's
ccompat API) answers them. For tests of the wire format that need no Java
(tests/unit/test_serde.py) and for bench/experiments/avro_write.py; the real registry is
tests/registry.py's Apicurio."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any, ClassVar


class StandInRegistry(http.server.BaseHTTPRequestHandler):
    """The calls confluent-kafka's client makes, answered as Confluent's registry (and
    Apicurio's ccompat API) answers them: register a schema, fetch one by id."""

    schemas: ClassVar[dict[int, str]] = {}
    rule_sets: ClassVar[dict[int, dict[str, Any]]] = {}  # a schema's ``ruleSet``, by id
    calls: ClassVar[list[str]] = []
    down: ClassVar[bool] = False

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        self.calls.append(f"POST {self.path}")
        length = int(self.headers["Content-Length"])
        body = json.loads(self.rfile.read(length))
        if self.down:
            self._reply(503, {"error_code": 50301, "message": "unavailable"})
            return
        # POST /subjects/<subject>/versions -> {"id": n}
        for schema_id, text in self.schemas.items():
            if text == body["schema"]:
                self._reply(200, {"id": schema_id})
                return
        schema_id = 100 + len(self.schemas)
        self.schemas[schema_id] = body["schema"]
        self._reply(200, {"id": schema_id})

    def do_GET(self) -> None:
        self.calls.append(f"GET {self.path}")
        # GET /schemas/ids/<id>
        path = self.path.split("?")[0]
        if path.startswith("/schemas/ids/"):
            schema_id = int(path.rsplit("/", 1)[1])
            if schema_id in self.schemas:
                reply: dict[str, Any] = {"schema": self.schemas[schema_id]}
                if schema_id in self.rule_sets:
                    reply["ruleSet"] = self.rule_sets[schema_id]
                self._reply(200, reply)
                return
        self._reply(404, {"error_code": 40403, "message": "Schema not found"})


@contextlib.contextmanager
def serve_stand_in() -> Iterator[str]:
    """A stand-in on a free loopback port, its schemas and calls reset: its URL."""
    StandInRegistry.schemas, StandInRegistry.calls, StandInRegistry.down = {}, [], False
    StandInRegistry.rule_sets = {}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandInRegistry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def count_serializer_calls(monkeypatch: Any) -> list[int]:
    """A list that grows by one at each call of any confluent-kafka `AvroSerializer` from now
    to the end of the test (``monkeypatch``: pytest's): which records went through it."""
    from confluent_kafka.schema_registry.avro import AvroSerializer

    return _count_calls(monkeypatch, AvroSerializer)


def count_deserializer_calls(monkeypatch: Any) -> list[int]:
    """As `count_serializer_calls`, of confluent-kafka's `AvroDeserializer`."""
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    return _count_calls(monkeypatch, AvroDeserializer)


def _count_calls(monkeypatch: Any, cls: type) -> list[int]:
    calls: list[int] = []
    real_call = cls.__call__

    def counted(self: Any, *args: Any) -> Any:
        calls.append(1)
        return real_call(self, *args)

    monkeypatch.setattr(cls, "__call__", counted)
    return calls
