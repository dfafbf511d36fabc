"""Bounds on Avro input: any record, under any schema a registry hands out, becomes a value
or a `RecordError` (a dead record) in bounded time and memory.

fastavro decodes in C, recursively, and trusts the counts in the bytes: data nested 10,000
levels deep under a recursive schema (a linked list, a tree) overflows the C stack and the
worker dies of SIGSEGV; a 7-byte block declaring 2^60 items of a zero-byte type (null, an
empty record) runs for centuries. So, before fastavro sees a record:

- A schema's JSON is at most `MAX_SCHEMA_BYTES` long and `MAX_SCHEMA_NESTING` levels deep
  (`schema_problem`): fastavro parses schemas recursively too.
- `Plan` compiles a schema once into a table of nodes and knows when the schema and the
  record's size alone bound the work: no recursion, no block (array or map) of items that
  may take no byte, at most `MAX_AVRO_DEPTH` levels, and at most `MAX_VALUES` values even
  if every byte left were an item of the most values. fastavro then fails fast on a count
  larger than the bytes left (each item reads a byte or more), and the record is not
  scanned: the common record costs nothing more.
- Otherwise `Plan.check` walks the record's encoding first, in Python with an explicit stack
  (no recursion): at most `MAX_AVRO_DEPTH` levels of records, arrays and maps (the bound of
  JSON input, `processor.models.limits.MAX_JSON_DEPTH`: a value deeper than that could not
  be written again); a block's count at most the bytes left when its items take a byte or
  more, and at most the values left in any case; `MAX_VALUES` values in all.

Pure: fastavro's schema parser and the standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import fastavro

from processor.models.limits import MAX_JSON_DEPTH, _deeper_than
from processor.serde.codec import RecordError

MAX_AVRO_DEPTH = MAX_JSON_DEPTH
MAX_VALUES = 1 << 20  # values (records, fields, items, map entries) decoded from one record
MAX_SCHEMA_BYTES = 256 * 1024
MAX_SCHEMA_NESTING = 128  # JSON levels: about 30 levels of nested records

# Kinds of node. A node is (kind, argument).
_LEAVE, _CHECK, _WIDTH, _VARINT, _BYTES, _ENUM, _UNION, _RECORD, _ARRAY, _MAP = range(10)
_PRIMITIVES: Mapping[str, tuple[int, int]] = {
    "null": (_WIDTH, 0),
    "boolean": (_WIDTH, 1),
    "float": (_WIDTH, 4),
    "double": (_WIDTH, 8),
    "int": (_VARINT, 0),
    "long": (_VARINT, 0),
    "bytes": (_BYTES, 0),
    "string": (_BYTES, 0),
}
_STRING = 2  # the node id of a string (a map's key): always compiled first


def schema_problem(text: str) -> str | None:
    """Why a schema's JSON text is refused before parsing (too long, nested too deeply, not
    JSON), or None."""
    if len(text) > MAX_SCHEMA_BYTES:
        return f"the schema is {len(text)} characters, over {MAX_SCHEMA_BYTES}"
    try:
        value = json.loads(text)
    except RecursionError:
        value = None
    except ValueError as exc:
        return f"the schema is not JSON: {exc}"
    if value is None or _deeper_than(value, MAX_SCHEMA_NESTING):
        return f"the schema nests JSON deeper than {MAX_SCHEMA_NESTING} levels"
    return None


class Plan:
    """A schema (its JSON, as ``json.loads`` gives it) compiled for `check`: ``nodes[i]`` is
    (kind, argument); ``name`` is the schema's full name (None for an unnamed type)."""

    def __init__(self, schema: Any) -> None:
        named: dict[str, Any] = {}
        compiler = _Compiler(named)
        # fastavro's parse gives every name in full (namespaces applied) and fills ``named``.
        parsed = fastavro.parse_schema(schema, named_schemas=named)
        self.name: str | None = parsed.get("name") if isinstance(parsed, dict) else None
        self.root = compiler.node(parsed)
        self.nodes = compiler.nodes
        self.zero = _zero_width(self.nodes)
        bounds = None if compiler.recursive else _bounds(self.nodes, self.zero, self.root)
        self.always = bounds is None or bounds[2] > MAX_AVRO_DEPTH
        # At most ``fixed + per_byte * <bytes>`` values, when not ``always``.
        self.fixed, self.per_byte = (0, 0) if bounds is None else bounds[:2]

    def scans(self, size: int) -> bool:
        """Whether `check` walks a record of ``size`` bytes."""
        return self.always or self.fixed + self.per_byte * size > MAX_VALUES

    def check(self, raw: bytes, pos: int = 0) -> None:
        """RecordError unless ``raw[pos:]`` can be decoded within the bounds."""
        if self.always or self.fixed + self.per_byte * (len(raw) - pos) > MAX_VALUES:
            _Scan(self, raw, pos).run()


class _Compiler:
    """Nodes of a (parsed) schema. Recursive, but only as deep as the schema's JSON, which
    `schema_problem` bounds for schemas from a registry."""

    def __init__(self, named: dict[str, Any]) -> None:
        self.nodes: list[tuple[int, Any]] = [(_LEAVE, None), (_CHECK, None), (_BYTES, 0)]
        self.named = named
        self.ids: dict[str, int] = {}
        self.open: set[str] = set()
        self.recursive = False

    def node(self, schema: Any) -> int:
        if isinstance(schema, list):
            return self._add((_UNION, tuple(self.node(branch) for branch in schema)))
        if isinstance(schema, str):
            return self._named(schema)
        kind = schema["type"]
        if kind in ("array", "map"):
            inner = self.node(schema["items" if kind == "array" else "values"])
            return self._add((_ARRAY if kind == "array" else _MAP, inner))
        if kind in ("record", "error", "enum", "fixed"):
            return self._define(schema)
        return self.node(kind)  # a primitive with a logicalType, or {"type": <a name>}

    def _named(self, name: str) -> int:
        primitive = _PRIMITIVES.get(name)
        if primitive is not None:
            return _STRING if name in ("string", "bytes") else self._add(primitive)
        if name in self.open:
            self.recursive = True
        if name in self.ids:
            return self.ids[name]
        return self._define(self.named[name])

    def _define(self, schema: Mapping[str, Any]) -> int:
        name = schema["name"]
        if name in self.ids:
            return self.ids[name]
        at = self.ids[name] = self._add((_LEAVE, None))  # replaced below
        if schema["type"] == "enum":
            self.nodes[at] = (_ENUM, len(schema["symbols"]))
        elif schema["type"] == "fixed":
            self.nodes[at] = (_WIDTH, int(schema["size"]))
        else:
            self.open.add(name)
            fields = tuple(self.node(field["type"]) for field in schema["fields"])
            self.open.discard(name)
            self.nodes[at] = (_RECORD, fields[::-1])  # reversed: the scan's stack pops them
        return at

    def _add(self, node: tuple[int, Any]) -> int:
        self.nodes.append(node)
        return len(self.nodes) - 1


def _zero_width(nodes: list[tuple[int, Any]]) -> list[bool]:
    """Which nodes may take no byte at all (null, fixed of size 0, records of those): the
    least fixed point, so a record that contains itself and nothing else is not one."""
    zero = [kind == _WIDTH and arg == 0 for kind, arg in nodes]
    changed = True
    while changed:
        changed = False
        for i, (kind, arg) in enumerate(nodes):
            if kind == _RECORD and not zero[i] and all(zero[f] for f in arg):
                zero[i] = changed = True
    return zero


def _bounds(
    nodes: list[tuple[int, Any]], zero: list[bool], root: int
) -> tuple[int, int, int] | None:
    """`_Bounds` of the root; None (always walk its records) for a schema whose types
    reference each other in a chain too long to follow recursively: a schema may define
    thousands of records side by side, each holding the one before, JSON nested 4 levels."""
    try:
        return _Bounds(nodes, zero).of(root)
    except RecursionError:
        return None


class _Bounds:
    """What a schema with no recursion bounds, per node: (values outside its blocks' items,
    values an item of its blocks may give per byte it takes, levels); None when a block's
    items may take no byte. Recursive, as deep as the schema."""

    def __init__(self, nodes: list[tuple[int, Any]], zero: list[bool]) -> None:
        self.nodes, self.zero = nodes, zero
        self.known: dict[int, tuple[int, int, int] | None] = {}

    def of(self, at: int) -> tuple[int, int, int] | None:
        if at not in self.known:
            self.known[at] = self._of(at)
        return self.known[at]

    def _of(self, at: int) -> tuple[int, int, int] | None:
        kind, arg = self.nodes[at]
        if kind in (_RECORD, _UNION):
            parts = [self.of(child) for child in arg]
            if None in parts:
                return None
            fixed = [p[0] for p in parts if p is not None]
            per_byte = max((p[1] for p in parts if p is not None), default=0)
            depth = max((p[2] for p in parts if p is not None), default=0)
            if kind == _UNION:
                return max(fixed, default=0), per_byte, depth
            return 1 + sum(fixed), per_byte, depth + 1
        if kind in (_ARRAY, _MAP):
            inner = self.of(arg)
            if inner is None or (kind == _ARRAY and self.zero[arg]):
                return None  # a map's entries take a byte at least: their key's length
            item = inner[0] + (kind == _MAP)
            return 1, max(item, inner[1]), inner[2] + 1
        return 1, 0, 0


class _Scan:
    """One walk of a record's encoding; raises RecordError at the first bound it crosses."""

    def __init__(self, plan: Plan, raw: bytes, pos: int) -> None:
        self.plan, self.raw, self.pos, self.end = plan, raw, pos, len(raw)
        self.depth, self.budget = 0, MAX_VALUES
        self.block_ends: list[int] = []

    def run(self) -> None:
        nodes, stack = self.plan.nodes, [self.plan.root]
        while stack:
            at = stack.pop()
            if at < 0:
                self._block(~at, stack)
                continue
            kind, arg = nodes[at]
            if kind == _VARINT:
                self._long()
            elif kind == _BYTES:
                self._bytes()
            elif kind == _WIDTH:
                self.pos += arg
            elif kind == _RECORD:
                self._enter()
                stack.append(_LEAVE)
                stack.extend(arg)
            elif kind == _LEAVE:
                self.depth -= 1
                continue
            else:
                self._rare(kind, arg, at, stack)
                if kind == _CHECK:
                    continue
            self.budget -= 1
            if self.budget < 0:
                self._spend(0)
        if self.pos > self.end:
            raise _cut_short()

    def _rare(self, kind: int, arg: Any, at: int, stack: list[int]) -> None:
        if kind == _UNION:
            stack.append(arg[self._index(len(arg), "union branch")])
        elif kind == _ENUM:
            self._index(arg, "enum symbol")
        elif kind == _CHECK:
            self._check_block_size()
        else:  # an array or a map: its blocks follow
            self._enter()
            stack.append(~at)

    def _block(self, at: int, stack: list[int]) -> None:
        """The next block of the array or map ``at``: its items go on the stack."""
        kind, inner = self.plan.nodes[at]
        count = self._long()
        if count == 0:
            self.depth -= 1
            return
        stack.append(~at)
        if count < 0:
            count = -count
            size = self._long()
            self.block_ends.append(self.pos + size)
            stack.append(_CHECK)
        if count > self.budget:  # each item spends from the budget when it is walked
            self._spend(count)
        left = self.end - self.pos
        if count > left and (kind == _MAP or not self.plan.zero[inner]):
            # An item that takes a byte or more (a map's entry has a key) cannot be more
            # than the bytes left.
            raise RecordError(f"Avro: a block of {count} items in {left} bytes", "too_large")
        item_kind, width = self.plan.nodes[inner]
        if kind == _ARRAY and item_kind in (_WIDTH, _VARINT, _BYTES):
            self._spend(count)
            self._primitives(item_kind, width, count)
        else:
            stack.extend((inner, _STRING) * count if kind == _MAP else (inner,) * count)

    def _primitives(self, kind: int, width: int, count: int) -> None:
        """``count`` items of a primitive type, without the stack."""
        if kind == _WIDTH:
            self.pos += width * count
        elif kind == _VARINT:
            for _ in range(count):
                self._long()
        else:
            for _ in range(count):
                self._bytes()

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_AVRO_DEPTH:
            raise RecordError(f"Avro: nested deeper than {MAX_AVRO_DEPTH} levels", "too_deep")

    def _spend(self, count: int) -> None:
        self.budget -= count
        if self.budget < 0:
            raise RecordError(f"Avro: more than {MAX_VALUES} values in a record", "too_large")

    def _check_block_size(self) -> None:
        # A block's byte size must be what its items took: a reader that skips the block by
        # its size (fastavro may) then goes on where this scan did.
        if self.pos != self.block_ends.pop():
            raise RecordError("Avro: a block's byte size is not its items' size", "serde_error")

    def _index(self, limit: int, what: str) -> int:
        index = self._long()
        if not 0 <= index < limit:
            raise RecordError(f"Avro: {what} {index} out of range", "serde_error")
        return index

    def _bytes(self) -> None:
        length = self._long()
        if not 0 <= length <= self.end - self.pos:
            raise _cut_short()
        self.pos += length

    def _long(self) -> int:
        """A zig-zag varint of at most 10 bytes."""
        pos = self.pos
        if pos < self.end and self.raw[pos] < 0x80:  # one byte: most counts and lengths
            byte = self.raw[pos]
            self.pos = pos + 1
            return (byte >> 1) ^ -(byte & 1)
        raw, shift, acc = self.raw, 0, 0
        while shift < 70:
            if pos >= self.end:
                raise _cut_short()
            byte = raw[pos]
            pos += 1
            acc |= (byte & 0x7F) << shift
            if byte < 0x80:
                self.pos = pos
                return (acc >> 1) ^ -(acc & 1)
            shift += 7
        raise RecordError("Avro: a varint longer than 10 bytes", "serde_error")


def _cut_short() -> RecordError:
    return RecordError("Avro: the record is cut short", "serde_error")
