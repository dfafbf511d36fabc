"""Formats of record keys and values: serdes.

A serde is any object with ``loads(bytes) -> value`` and ``dumps(value) -> bytes``
(`Serde`). Sources decode with ``loads``, sinks encode with ``dumps``; ``"json"``,
``"text"`` and ``"bytes"`` name the built-in ones, and `Avro` ships here too::

    from processor import Pipeline
    from processor.serde import Avro

    click = {"type": "record", "name": "Click",
             "fields": [{"name": "page", "type": "string"}, {"name": "n", "type": "long"}]}
    p = Pipeline()
    clicks = p.source("clicks", value=Avro(click, registry_url="http://registry:8081"))
    clicks.map(lambda c: {**c, "n": c["n"] + 1}).sink("clicks-out", value=Avro(click))

An exception in ``loads`` makes the record a dead record with its original bytes, one in
``dumps`` a dead record; `Unavailable` (a schema registry that does not answer) is no fault
of the record's: the task fails and retries instead.

A serde may also have ``for_topic(topic, is_key) -> serde``: a source or sink calls it with its
topic, for serdes that name things after it (the registry's subject ``<topic>-value``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from processor.errors import PipelineError
from processor.serde.avro import Avro
from processor.serde.codec import RecordError, Unavailable, decode, sink_value
from processor.serde.protocol import Serde

Format = Literal["text", "json", "bytes"]
FORMATS: tuple[Format, ...] = ("text", "json", "bytes")

__all__ = [
    "BYTES",
    "FORMATS",
    "JSON",
    "TEXT",
    "Avro",
    "Builtin",
    "Format",
    "RecordError",
    "Serde",
    "Unavailable",
    "resolve",
]


class Builtin:
    """``"json"``, ``"text"`` or ``"bytes"`` as a serde: what a source decodes (with the same
    checks and dead-record reasons as the engine's own source path) and a sink encodes."""

    def __init__(self, name: Format, dumps: Callable[[Any], bytes]) -> None:
        self.name: Format = name
        self._dumps = dumps

    def loads(self, raw: bytes) -> Any:
        """``JSON.loads(b'{"a": 1}') == {"a": 1}``; RecordError if it does not decode."""
        return decode(self.name, raw)

    def dumps(self, value: Any) -> bytes:
        """``TEXT.dumps("hé") == "hé".encode()``; RecordError for a value of another kind."""
        return self._dumps(value)

    def __repr__(self) -> str:
        return f"processor.serde.{self.name.upper()}"


def _text(value: Any) -> bytes:
    if type(value) is not str:
        raise RecordError(f'value="text" takes str, got {type(value).__name__}')
    try:
        return value.encode()
    except UnicodeEncodeError as exc:  # a lone surrogate a function made
        raise RecordError(f"value is not UTF-8: {exc.reason}") from None


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise RecordError(f'value="bytes" takes bytes, got {type(value).__name__}')


JSON = Builtin("json", sink_value)
TEXT = Builtin("text", _text)
BYTES = Builtin("bytes", _bytes)
_BUILTINS = {"json": JSON, "text": TEXT, "bytes": BYTES}


def is_serde(obj: Any) -> bool:
    """Whether ``obj`` has a callable ``loads`` and ``dumps``."""
    return callable(getattr(obj, "loads", None)) and callable(getattr(obj, "dumps", None))


def resolve(spec: Any, where: str, topic: str | None = None, is_key: bool = False) -> Serde:
    """The serde ``spec`` names: ``"json"``, ``"text"``, ``"bytes"`` or a serde object (bound
    to ``topic`` through its ``for_topic``, if it has one). Raises PipelineError naming
    ``where`` for anything else.

    >>> resolve("json", "source('t')").loads(b"[1]")
    [1]
    """
    if isinstance(spec, str):
        builtin = _BUILTINS.get(spec)
        if builtin is None:
            raise PipelineError(f"{where}: the format must be one of {FORMATS} or a serde")
        return builtin
    if not is_serde(spec):
        raise PipelineError(
            f"{where}: expected one of {FORMATS} or a serde (an object with loads(bytes) and "
            f"dumps(value)), got {type(spec).__name__}"
        )
    bind = getattr(spec, "for_topic", None)
    if topic is not None and callable(bind):
        bound = bind(topic, is_key)
        if not is_serde(bound):
            raise PipelineError(f"{where}: {type(spec).__name__}.for_topic returned no serde")
        return bound  # type: ignore[no-any-return]
    return spec  # type: ignore[no-any-return]


def loads_all(serde: Serde, raws: list[bytes]) -> list[Any] | None:
    """Every value decoded, or None if one fails (the caller then goes record by record,
    `processor.serde.codec.decode`, to dead-letter just those)."""
    try:
        return list(map(serde.loads, raws))
    except Exception:  # noqa: BLE001 - any failure of a user's serde: find it record by record
        return None
