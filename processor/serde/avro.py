"""Avro: plain Avro binary (fastavro), or the Confluent wire format through a schema registry
(confluent-kafka's own ``schema_registry`` client and its Avro serde, fastavro underneath).

The wire format is a magic byte 0, the schema's id in the registry (4 bytes, big-endian) and
the Avro body. Writing registers the schema under the subject ``<topic>-value`` (``-key``
for keys: Confluent's default TopicNameStrategy) unless ``auto_register=False``; reading
fetches the writer's schema by the record's id and resolves it to this one.

Any record becomes a value or a dead record in bounded time and memory, whatever schema its
writer registered (`processor.serde.avro_bounds`): a source takes a writer schema only if it
is Avro, has no references, is within the size and nesting bounds, parses, and (when this
schema is a record, enum or fixed) has this schema's full name or one of its aliases; every
record under any other is dead. A record whose schema and size do not bound the work alone
(recursion, items of no bytes, more values than the budget could fit) is walked first with
the bounds on depth, counts and values.

One object serves every task thread of a worker: fastavro is reentrant and the registry
client caches under its own locks. The client is made on first use, in the worker, never at
import time (every process imports the pipeline file).
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

import fastavro

from processor.errors import PipelineError
from processor.redact import redacted
from processor.serde.avro_bounds import Plan, schema_problem
from processor.serde.avro_writer import record_writer
from processor.serde.codec import RecordError, Unavailable

# HTTP statuses of a registry that is away or overloaded, not of a refused schema or id.
_RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})

# Seconds a registry request may take before it fails the task (which retries).
REQUEST_TIMEOUT_S = 30.0

# Writer schemas (accepted or not) remembered per Avro object, by id: at most this many.
WRITER_SCHEMAS_KEPT = 1024


def _topic_subject(ctx: Any, record_name: Any) -> Any:
    """``<topic>-value`` (``-key``), as documented, without asking the registry: from 2.16,
    confluent-kafka's default first asks the registry for the topic's "associations", a newer
    endpoint that Confluent-compatible registries such as Apicurio do not all serve."""
    from confluent_kafka.schema_registry import topic_subject_name_strategy

    return topic_subject_name_strategy(ctx, record_name)


class Avro:
    """Avro values (or keys).

    ``Avro(schema)``: plain Avro binary, the schema known to both sides. ``Avro(schema,
    registry_url="http://registry:8081")``: the Confluent wire format, the schema registered
    under ``<topic>-value`` by the sink that writes it. ``registry_config``: more settings of
    confluent-kafka's ``SchemaRegistryClient`` (``basic.auth.user.info``, TLS files).

    >>> click = {"type": "record", "name": "Click",
    ...          "fields": [{"name": "page", "type": "string"}]}
    >>> Avro(click).dumps({"page": "a"})
    b'\\x02a'
    >>> Avro(click).loads(b"\\x02a")
    {'page': 'a'}
    """

    def __init__(
        self,
        schema: str | Mapping[str, Any],
        registry_url: str | None = None,
        *,
        registry_config: Mapping[str, Any] | None = None,
        auto_register: bool = True,
    ) -> None:
        self.schema_str = schema if isinstance(schema, str) else json.dumps(schema)
        problem = schema_problem(self.schema_str)
        if problem is not None:
            raise PipelineError(f"Avro(schema): {problem}")
        try:
            self._parsed = fastavro.parse_schema(json.loads(self.schema_str))
            self._plan = Plan(json.loads(self.schema_str))
        except Exception as exc:
            raise PipelineError(f"Avro(schema): not an Avro schema: {exc}") from exc
        self._names = _names(self._parsed)
        self._write = record_writer(self._parsed)  # None: fastavro writes every record
        self._prefix: bytes | None = None  # the wire format's 5 bytes, once the registry gave them
        self._writers: dict[int, Plan | RecordError] = {}
        # (writer, reader schema) of the records `_loads_registered` reads itself, by id
        self._direct: dict[int, tuple[Any, Any]] = {}
        self.registry_url = registry_url
        self.registry_config = dict(registry_config or {})
        self.auto_register = auto_register
        self.topic: str | None = None
        self.is_key = False
        self._lock = threading.Lock()
        self._serializer: Callable[..., Any] | None = None
        self._deserializer: Callable[..., Any] | None = None
        self._context: Any = None
        self._registry: Any = None

    def for_topic(self, topic: str, is_key: bool = False) -> Avro:
        """This serde for ``topic``'s values (keys): a registry's subject is named after it.
        Sources and sinks call it; plain Avro is the same for every topic."""
        if self.registry_url is None:
            return self
        # A new object, not a copy: its registry client, serdes and writer schemas are its own.
        bound = Avro(
            self.schema_str,
            self.registry_url,
            registry_config=self.registry_config,
            auto_register=self.auto_register,
        )
        bound.topic, bound.is_key = topic, is_key
        return bound

    def dumps(self, value: Any) -> bytes:
        """``value`` in Avro binary (behind the wire format's 5 bytes with a registry)."""
        if self.registry_url is not None:
            return self._dumps_registered(value)
        if self._write is not None:
            try:
                return self._write(value)
            except Exception:  # noqa: BLE001 - not sure of it: fastavro writes it or says why
                pass
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self._parsed, value)
        return out.getvalue()

    def loads(self, raw: bytes) -> Any:
        """The value in ``raw``; with a registry, its writer's schema resolved to this one."""
        if self.registry_url is not None:
            return self._loads_registered(raw)
        self._plan.check(raw)
        data = io.BytesIO(raw)
        value = fastavro.schemaless_reader(data, self._parsed)
        if data.tell() != len(raw):
            # Avro has no framing: a record of another schema can read as this one.
            raise ValueError(f"{len(raw) - data.tell()} bytes left after the Avro record")
        return value

    def _loads_registered(self, raw: bytes) -> Any:
        """The value of a record in the wire format. confluent-kafka's `AvroDeserializer`
        reads it with fastavro, the writer's schema resolved to this one, around steps this
        module's configuration leaves idle (no latest version, hence no migrations; no rules of
        this schema; no `from_dict`): where the writer's schema has no rules either and is not
        ``bytes`` (which the deserializer hands over raw), this reads it so itself, without
        those steps' per-record work; any other record takes the deserializer's way."""
        if raw[:1] != b"\0" or len(raw) <= 5:
            raise ValueError("not the Confluent wire format (magic byte 0, schema id, body)")
        read = self._deserializer_fn()
        schema_id = int.from_bytes(raw[1:5], "big")
        self._writer(schema_id).check(raw, 5)
        direct = self._direct.get(schema_id)
        if direct is None:
            return self._through_registry(read, raw)
        body = io.BytesIO(raw)
        body.seek(5)
        return fastavro.schemaless_reader(body, *direct)

    def _dumps_registered(self, value: Any) -> bytes:
        """``value`` in the wire format: confluent-kafka's `AvroSerializer` registers the
        schema (or looks it up) with the first record; after it, with this module's
        configuration (no latest version, no rules, no validation), every record is the same
        5 bytes (magic byte, schema id) and fastavro's body, which the compiled writer writes
        (3x faster) where it is sure of the value; any other record takes the serializer's way."""
        prefix, write = self._prefix, self._write
        if prefix is not None and write is not None:
            try:
                return prefix + write(value)
            except Exception:  # noqa: BLE001 - not sure of it: the serializer's way
                pass
        raw: bytes = self._through_registry(self._serializer_fn(), value)
        if prefix is None and write is not None:
            self._prefix = _wire_prefix(raw, write, value)
        return raw

    def __repr__(self) -> str:
        url = self.registry_url
        where = "" if url is None else f", registry_url={redacted(url)!r}"
        parsed = self._parsed
        name = parsed.get("name", parsed.get("type")) if isinstance(parsed, dict) else parsed
        return f"Avro({name!r}{where})"

    # -- the registry -----------------------------------------------------------------------

    def _through_registry(self, fn: Callable[[Any, Any], Any], arg: Any) -> Any:
        from confluent_kafka.schema_registry.common._httpx_compat import httpx
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        try:
            return fn(arg, self._context)
        except SchemaRegistryError as exc:
            status = exc.http_status_code
            if status is None or status < 0 or status in _RETRY_STATUS:
                raise Unavailable(redacted(f"schema registry {self.registry_url}: {exc}")) from exc
            raise
        except (httpx.TransportError, OSError) as exc:
            raise Unavailable(redacted(f"schema registry {self.registry_url}: {exc}")) from exc

    def _client(self) -> Any:
        """The registry client (made once, under the lock, by the first serializer or
        deserializer); sets the context the serde calls name the topic with."""
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.serialization import MessageField, SerializationContext

        if self._registry is not None:
            return self._registry
        if self.topic is None:
            raise RuntimeError(
                "Avro(registry_url=...) names its subject after a topic: use it in a source or "
                "sink, or call .for_topic(topic) first"
            )
        field = MessageField.KEY if self.is_key else MessageField.VALUE
        self._context = SerializationContext(self.topic, field)
        # A registry that accepts a connection and never answers would hold the task for ever
        # (the client waits without a limit by default): time out, and the task retries.
        conf = {"timeout": REQUEST_TIMEOUT_S, **self.registry_config, "url": self.registry_url}
        self._registry = SchemaRegistryClient(conf)
        return self._registry

    def _writer(self, schema_id: int) -> Plan:
        """The plan of the writer schema ``schema_id`` if this source accepts it (fetched
        once, from the client's cache after that), else RecordError."""
        plan = self._writers.get(schema_id)
        if plan is None:
            subject = _topic_subject(self._context, None)
            schema = self._through_registry(
                lambda i, _ctx: self._registry.get_schema(i, subject), schema_id
            )
            plan = self._accept(schema)
            if len(self._writers) >= WRITER_SCHEMAS_KEPT:
                self._writers.clear()
                self._direct.clear()
            if not isinstance(plan, RecordError):
                writer = _direct_reader(schema)
                if writer is not None:
                    # fastavro resolves nothing if they are equal: asked once, not per record.
                    reader = None if writer == self._parsed else self._parsed
                    self._direct[schema_id] = (writer, reader)
            self._writers[schema_id] = plan
        if isinstance(plan, RecordError):
            raise RecordError(f"writer schema {schema_id}: {plan}", plan.reason)
        return plan

    def _accept(self, schema: Any) -> Plan | RecordError:
        """A plan of the registry's ``schema`` (a confluent-kafka ``Schema``), or why it is
        refused."""
        if schema.references:
            return RecordError("schemas with references are not accepted", "schema_refused")
        if (schema.schema_type or "AVRO") != "AVRO":
            return RecordError(f"a {schema.schema_type} schema, not Avro", "schema_refused")
        text = _schema_text(schema)
        problem = schema_problem(text)
        if problem is not None:
            return RecordError(problem, "schema_refused")
        try:
            plan = Plan(json.loads(text))
        except Exception as exc:  # noqa: BLE001 - fastavro's parse: any failure refuses it
            return RecordError(f"not an Avro schema: {exc}", "schema_refused")
        if self._names and plan.name not in self._names:
            return RecordError(
                f"its type {plan.name!r} is not {sorted(self._names)}", "schema_refused"
            )
        return plan

    def _serializer_fn(self) -> Callable[[Any, Any], Any]:
        if self._serializer is None:
            with self._lock:
                if self._serializer is None:
                    from confluent_kafka.schema_registry.avro import AvroSerializer

                    conf = {
                        "auto.register.schemas": self.auto_register,
                        "subject.name.strategy": _topic_subject,
                    }
                    self._serializer = AvroSerializer(self._client(), self.schema_str, conf=conf)
        return self._serializer

    def _deserializer_fn(self) -> Callable[[Any, Any], Any]:
        if self._deserializer is None:
            with self._lock:
                if self._deserializer is None:
                    from confluent_kafka.schema_registry.avro import AvroDeserializer

                    conf = {"subject.name.strategy": _topic_subject}
                    self._deserializer = AvroDeserializer(
                        self._client(), self.schema_str, conf=conf
                    )
        return self._deserializer


def _wire_prefix(raw: bytes, write: Callable[[Any], bytes], value: Any) -> bytes | None:
    """The 5 bytes before the body in ``raw``, the serializer's ``value``, if the rest is what
    ``write`` makes of it (else None: the serializer writes every record)."""
    try:
        body = write(value)
    except Exception:  # noqa: BLE001 - a value the writer is not sure of: learn from another
        return None
    if len(raw) != 5 + len(body) or raw[0] != 0 or not raw.endswith(body):
        return None
    return raw[:5]


def _direct_reader(schema: Any) -> Any:
    """The parsed writer ``schema`` (a registry ``Schema`` the source accepted) if a record
    of it reads as fastavro reads it, with no rule of the deserializer's between; else None."""
    rules = schema.rule_set
    if rules is not None and (rules.encoding_rules or rules.domain_rules or rules.migration_rules):
        return None
    try:
        parsed = fastavro.parse_schema(json.loads(_schema_text(schema)))
    except Exception:  # noqa: BLE001 - the deserializer's way, and its error
        return None
    if isinstance(parsed, dict) and parsed.get("type") == "bytes":
        return None  # the deserializer hands a `bytes` writer's body over as it is
    return parsed


def _schema_text(schema: Any) -> str:
    """A registry ``Schema``'s JSON text; a primitive's bare name as ``{"type": name}``, as
    the deserializer reads it."""
    text: str = (schema.schema_str or "").strip()
    if not text.startswith(("{", "[")):
        text = '{"type":' + text + "}"
    return text


def _names(parsed: Any) -> frozenset[str]:
    """The full name and aliases of a named schema (record, enum, fixed): what a writer
    schema must be named; empty for other schemas (any writer schema fastavro resolves)."""
    if not isinstance(parsed, dict) or "name" not in parsed:
        return frozenset()
    name = parsed["name"]
    space = name.rpartition(".")[0]
    aliases = {a if "." in a or not space else f"{space}.{a}" for a in parsed.get("aliases", ())}
    return frozenset({name, *aliases})
