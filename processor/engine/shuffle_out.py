"""What one stage writes into the shuffle of a stage downstream (`ShuffleOut`): keyed
records, pre-aggregated per key when the downstream stage is combinable, encoded into shuffle
records of at most about ``MAX_RECORD_BYTES`` per partition.

The partition of a key is ``crc32(key) % partitions``, fixed for good because the key's state
lives in that partition's task. A record that cannot be keyed, encoded or shipped (a key that
is not UTF-8, a value JSON cannot encode, a single item larger than Kafka takes) is a dead
record, reported through the stage's ``dead`` callback.
"""

from __future__ import annotations

import zlib
from collections import Counter, deque
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, cast

from processor.api.node import CountNode, KeyByNode
from processor.api.ops import TAGGED, UNSET, folder, key_text, oversized
from processor.api.streams import Node
from processor.engine.meta import Meta, to_wire
from processor.models.limits import DEFAULT_RECORD_LIMIT
from processor.models.records import encode_shuffle
from processor.plan.stages import Stage
from processor.serde.codec import RecordError, shown

# Of a shuffle record: partials by key, or [key, value(, time(, headers))] pairs (lists or
# tuples).
_Body = dict[str, Any] | list[Sequence[Any]]
# Well below Kafka's default 1 MB record limit, also after the broker's batch overhead.
MAX_RECORD_BYTES = 512 * 1024
_NOT_UTF8 = -2  # `ShuffleOut._partition` of a key no record can carry
_FIRST = itemgetter(0)


class ShuffleOut:
    """What one stage writes into the shuffle of a stage downstream, until it is flushed."""

    def __init__(
        self,
        head: KeyByNode,
        target: Stage,
        partitions: int,
        max_key_bytes: int,
        dead: Callable[[Node, Exception, Any], None],
        combine: bool = True,
        max_record_bytes: int = DEFAULT_RECORD_LIMIT,
    ) -> None:
        self.head = head  # the key_by node
        self.partitions = partitions
        self.oversized = 0  # keys too long to ship (counted, skipped)
        self._key_fn = head.fn
        self._prune = head.prune  # of one key's values taken together, those to ship
        # Half a record at most: a key's sink record (key, digits) always fits.
        self._max_key_bytes = min(max_key_bytes, max_record_bytes // 2)
        self._max_record = max_record_bytes
        self._dead = dead  # a record that cannot be keyed or pre-aggregated: (node, error, value)
        # combine=False ships every record (benchmarks: the work of an engine without one).
        combiner = target.combiner if combine else None
        self._combiner = combiner
        self._count = isinstance(combiner, CountNode)
        self._fold = None if combiner is None or self._count else folder(combiner)
        self._counts: Counter[Any] = Counter()  # raw key -> partial count
        self._partials: dict[str, Any] = {}  # key text -> partial aggregate
        # uncombined: every (key text, value), or (key text, value, time) in a timed pipeline
        self._pairs: list[tuple[str, Any]] = []
        self._partition_of: dict[str, int] = {}
        self._item_bytes = 0.0  # bytes an item took in the last records encoded (`_slices`)

    def __len__(self) -> int:
        return len(self._counts) + len(self._partials) + len(self._pairs)

    def add(
        self,
        keys: list[Any],
        values: list[Any],
        all_str: bool = False,
        times: list[int] | None = None,
    ) -> None:
        """``all_str``: the caller knows every key is a plain ``str`` (skips that check);
        ``times``: event times, shipped with uncombined records of a timed pipeline."""
        if times is not None and self._combiner is None:
            self._add_timed(keys, values, times)
            return
        if self._count and (all_str or set(map(type, keys)) <= {str}):
            self._counts.update(keys)  # the word count path: one C loop per batch
            return
        try:
            # Plain strings, none tagged-looking (a C loop): each is its own text.
            texts = keys if all_str and TAGGED not in "".join(keys) else _texts(keys)
        except (RecordError, ValueError):
            texts, values = self._keyable(keys, values)
        if self._count:
            partials = self._partials
            for text in texts:
                partials[text] = partials.get(text, 0) + 1
            return
        if self._fold is None:
            self._pairs.extend(zip(texts, values, strict=True))
            return
        fold, partials = self._fold, self._partials
        for text, value in zip(texts, values, strict=True):
            try:
                partials[text] = fold(partials.get(text, UNSET), value)
            except Exception as exc:  # noqa: BLE001 - a user function's failure: dead record
                assert self._combiner is not None
                self._dead(self._combiner, exc, value)

    def _add_timed(self, keys: list[Any], values: list[Any], times: list[int]) -> None:
        try:
            self._pairs.extend(zip(_texts(keys), values, times, strict=True))  # type: ignore[arg-type]
            return
        except (RecordError, ValueError):  # find the keys that cannot be shipped
            pass
        for key, value, ts in zip(keys, values, times, strict=True):
            try:
                text = key if type(key) is str and key[:1] != TAGGED else key_text(key)
            except RecordError as exc:
                self._dead(self.head, exc, value)
                continue
            self._pairs.append((text, value, ts))  # type: ignore[arg-type]

    def add_meta(self, keys: list[Any], values: list[Any], metas: list[Meta]) -> None:
        """Uncombined records with their event time and headers, for a stage that takes
        metadata (`processor.engine.meta`)."""
        pairs: list[Any] = self._pairs
        for key, value, meta in zip(keys, values, metas, strict=True):
            try:
                text = key if type(key) is str and key[:1] != TAGGED else key_text(key)
            except RecordError as exc:
                self._dead(self.head, exc, value)
                continue
            pairs.append((text, value, meta.timestamp, to_wire(meta.headers)))

    def _keyable(self, keys: list[Any], values: list[Any]) -> tuple[list[str], list[Any]]:
        """Key texts and values of the records whose key can be shipped; the others are dead
        at the key_by, as in the reference run."""
        texts: list[str] = []
        kept: list[Any] = []
        for key, value in zip(keys, values, strict=True):
            try:
                texts.append(key_text(key))
            except RecordError as exc:
                self._dead(self.head, exc, value)
                continue
            kept.append(value)
        return texts, kept

    def take(self, channel: int) -> list[tuple[int, bytes]]:
        """(partition, record value) of everything buffered; the buffers are empty after."""
        combined: dict[str, Any] = self._partials
        counts = self._counts  # plain strings: their own key text unless tagged-looking
        if counts and not combined:
            # Distinct strings have distinct key texts: one comprehension, no merging.
            combined = {(k if k[:1] != TAGGED else key_text(k)): n for k, n in counts.items()}
        else:
            for key, n in counts.items():
                text = key_text(key)
                combined[text] = combined.get(text, 0) + n
        out: list[tuple[int, bytes]] = []
        if combined:
            parts: list[dict[str, Any]] = [{} for _ in range(self.partitions)]
            partition_of = self._partition_of
            for text, partial in combined.items():
                p = partition_of.get(text)
                if p is None:
                    p = self._partition(text)
                if p >= 0:
                    parts[p][text] = partial
                elif p == _NOT_UTF8:
                    # A count stands for as many records (with the key as their value).
                    copies = partial if self._count else 1
                    for _ in range(copies):
                        self._dead(self.head, _not_utf8(text), text if self._count else partial)
            for p, body in enumerate(parts):
                out.extend((p, v) for v in self._encode(channel, body))
        if self._pairs:
            if self._prune is not None:
                self._pairs = _pruned(self._pairs, self._prune)
            lists = self._by_partition(self._pairs)
            for p, pairs in enumerate(lists):
                out.extend((p, v) for v in self._encode(channel, pairs))
        self._counts, self._partials, self._pairs = Counter(), {}, []
        return out

    def _by_partition(self, records: list[Any]) -> list[list[Sequence[Any]]]:
        """Uncombined records by partition, in their order (a record is a tuple: JSON writes
        it as the list it decodes to); those no record can carry are dead or skipped."""
        lists: list[list[Sequence[Any]]] = [[] for _ in range(self.partitions)]
        texts = list(map(_FIRST, records))
        found = list(map(self._partition_of.get, texts))
        if None in found:  # keys new to this task (and after the cache was cleared)
            for i in [i for i, p in enumerate(found) if p is None]:
                found[i] = self._partition(texts[i])
        ps = cast("list[int]", found)  # none is None now
        if min(ps) >= 0:
            # In C: each record appended to its partition's list.
            deque(map(list.append, map(lists.__getitem__, ps), records), maxlen=0)
            return lists
        for record, p in zip(records, ps, strict=True):
            if p >= 0:
                lists[p].append(record)
            elif p == _NOT_UTF8:
                self._dead(self.head, _not_utf8(record[0]), record[1])
        return lists

    def _encode(self, channel: int, body: _Body) -> list[bytes]:
        """``body`` as shuffle records; what cannot be shipped is dead: a value JSON or
        UTF-8 cannot carry, or one item larger than a record may be."""
        too_big: list[_Body] = []
        try:
            out: list[bytes] = []
            for part in self._slices(body):
                out += _encode_within(channel, part, self._max_record, too_big)
        except (TypeError, ValueError, RecursionError):  # find the items, ship the rest
            too_big = []
            out = self._encode_each(channel, body, too_big)
        else:
            if out and len(body) > 1:
                self._item_bytes = sum(map(len, out)) / len(body)
        for single in too_big:
            (value,) = single.values() if isinstance(single, dict) else (single[0][1],)
            size = len(encode_shuffle(channel, single))
            self._dead(self.head, oversized(size, self._max_record), value)
        return out

    def _slices(self, body: _Body) -> list[_Body]:
        """``body`` in slices of about a record each, by the bytes an item took in the last
        records: a large body is encoded once, not whole and then again in slices."""
        per_item = self._item_bytes
        target = min(MAX_RECORD_BYTES, self._max_record) * 0.9
        if per_item <= 0 or len(body) * per_item <= target:
            return [body]
        step = max(1, int(target / per_item))
        if isinstance(body, dict):
            items = list(body.items())
            return [dict(items[i : i + step]) for i in range(0, len(items), step)]
        return [body[i : i + step] for i in range(0, len(body), step)]

    def _encode_each(self, channel: int, body: _Body, too_big: list[_Body]) -> list[bytes]:
        """The slow path of a body that did not encode: each item alone first (the ones
        that fail are dead), then the others together again."""
        singles: list[_Body] = (
            [{k: v} for k, v in body.items()] if isinstance(body, dict) else [[p] for p in body]
        )
        kept: list[_Body] = []
        alone: list[bytes] = []
        for single in singles:
            try:
                alone.append(encode_shuffle(channel, single))
            except (TypeError, ValueError, RecursionError) as exc:
                (value,) = single.values() if isinstance(single, dict) else (single[0][1],)
                if isinstance(exc, RecursionError):
                    error = RecordError(f"value {shown(value)} is nested too deeply", "too_deep")
                else:
                    error = RecordError(f"value {shown(value)} is not JSON-encodable: {exc}")
                self._dead(self.head, error, value)
                continue
            kept.append(single)
        merged: _Body
        if isinstance(body, dict):
            merged = {k: v for single in kept for k, v in single.items()}  # type: ignore[union-attr]
        else:
            merged = [p for single in kept for p in single]
        try:
            return _encode_within(channel, merged, self._max_record, too_big)
        except (TypeError, ValueError, RecursionError):  # deeper in the stack: one by one
            fits = [v for v in alone if len(v) <= self._max_record]
            too_big.extend(s for s, v in zip(kept, alone, strict=True) if len(v) > self._max_record)
            return fits

    def _partition(self, text: str) -> int:
        p = self._partition_of.get(text)
        if p is None:
            try:
                raw = text.encode()
            except UnicodeEncodeError:  # a lone surrogate a function made: no record has it
                return _NOT_UTF8
            if len(raw) > self._max_key_bytes:
                self.oversized += 1
                return -1
            if len(self._partition_of) > 1_000_000:
                self._partition_of.clear()
            p = self._partition_of[text] = zlib.crc32(raw) % self.partitions
        return p


def _texts(keys: list[Any]) -> list[str]:
    """`key_text` of each key, inline for a plain string (itself) and an int (NUL and its
    digits, the JSON `key_text` writes): no call per key. Raises RecordError (or ValueError:
    an int of over 4,300 digits) if a key cannot be shipped."""
    tag = TAGGED
    return [
        k if type(k) is str and k[:1] != tag else (f"{tag}{k}" if type(k) is int else key_text(k))
        for k in keys
    ]


def _pruned(pairs: list[Any], prune: Callable[[list[Any]], list[Any]]) -> list[Any]:
    """Uncombined records (tuples, the key text first, the value second) with each key's
    values cut to what ``prune`` keeps of them, in their order."""
    by_key: dict[str, list[Any]] = {}
    for pair in pairs:
        by_key.setdefault(pair[0], []).append(pair)
    kept: set[int] = set()  # the pairs kept, by identity (each is its own tuple in ``pairs``)
    for group in by_key.values():
        values = {id(v) for v in prune([pair[1] for pair in group])}
        kept.update(id(pair) for pair in group if id(pair[1]) in values)
    if len(kept) == len(pairs):
        return pairs
    return [pair for pair in pairs if id(pair) in kept]


def _not_utf8(text: str) -> RecordError:
    return RecordError(f"key {shown(text)} is not UTF-8 (a lone surrogate)", "invalid_unicode")


def _encode_within(channel: int, body: _Body, limit: int, too_big: list[_Body]) -> list[bytes]:
    """``body`` as shuffle record values of at most about MAX_RECORD_BYTES each; a single
    item above ``limit`` (Kafka's) goes to ``too_big`` instead."""
    if not body:
        return []
    value = encode_shuffle(channel, body)
    target = min(MAX_RECORD_BYTES, limit)
    if len(value) <= target:
        return [value]
    if len(body) == 1:
        if len(value) > limit:
            too_big.append(body)
            return []
        return [value]
    # As many slices as the size asks for (a tenth to spare), so that a large body is
    # encoded about twice, not once per halving.
    slices = min(len(body), -(-len(value) * 11 // (target * 10)))
    step = -(-len(body) // slices)
    out: list[bytes] = []
    if isinstance(body, dict):
        items = list(body.items())
        for i in range(0, len(items), step):
            out += _encode_within(channel, dict(items[i : i + step]), limit, too_big)
    else:
        for i in range(0, len(body), step):
            out += _encode_within(channel, body[i : i + step], limit, too_big)
    return out
