"""What a stage's operators share (`StageContext`): their state reads, their dead records and
the output the task takes at the epoch's end.

Each `processor.engine.chain.StageChain` builds one and gives it to every operator it
compiles (`processor.engine.operators`): an operator reads state, reports a record that
failed and writes sink records through it, never through the chain. The chain takes the
output back from it (`StageChain.take_sinks` and the others).

- State reads (`reader`, `load`): the task's backend, or, from the first key a TTL expired
  this epoch on, a filter that reads those keys as missing until the flush deletes them
  (`ExpiredFilter`, `expire`).
- Dead records (`fail`): a record that failed in an operator; while `values` runs a source
  batch (`source_batch`), one that is a source value is found in it (by identity, on the
  first dead record of the batch), so that the task writes that record's own bytes.
- Output: sink records (``sinks``, ``headed`` with headers), a PostgreSQL sink's rows
  (``rows``), late records (into ``sinks`` under the late topic, counted in ``late``), the
  shuffles into the stages downstream (``shuffles``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Protocol

from processor.api.ops import UNSET, key_of, load_value
from processor.api.postgres import Rows
from processor.api.sinks import Headed
from processor.api.streams import Node
from processor.engine.dead import DeadRecord, dead_record
from processor.engine.shuffle_out import ShuffleOut
from processor.engine.state_keys import state_key
from processor.serde.codec import RecordError, shown, sink_value, sink_values

SinkRecords = dict[str, list[tuple[bytes | None, bytes]]]  # topic -> (key, value) records


class StateReader(Protocol):
    def get_many(self, keys: list[bytes]) -> list[bytes | None]: ...


class StateBackend(StateReader, Protocol):
    def write(self, items: Mapping[bytes, bytes | None]) -> None: ...


class ExpiredFilter:
    """State reads where an operator has a TTL: a key expired this epoch reads as missing (its
    deletion is written at the flush)."""

    __slots__ = ("expired", "state")

    def __init__(self, state: StateReader, expired: set[bytes]) -> None:
        self.state, self.expired = state, expired

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        raws = self.state.get_many(keys)
        expired = self.expired
        if not expired:
            return raws
        return [None if k in expired else raw for k, raw in zip(keys, raws, strict=True)]


class StageContext:
    """The state reads, dead records and output of one task's operators (see the module)."""

    def __init__(
        self, state: StateBackend, timed: bool, late_topic: str, max_record_bytes: int
    ) -> None:
        """``timed``: the stage's records have event times; ``late_topic``: where windows and
        joins write late records; ``max_record_bytes``: the largest record (key and value)
        Kafka takes, a larger one is a dead record."""
        self.state = state
        self.timed = timed
        self.late_topic, self.max_record = late_topic, max_record_bytes
        # The keys a TTL expired this epoch (`processor.engine.ttl`), deleted at the flush;
        # the reads go through a filter from the first expiry on.
        self.expired: set[bytes] = set()
        self.reader: StateReader = state
        self.sinks: SinkRecords = {}
        self.headed: dict[str, list[Headed]] = {}  # sinks with a headers function
        self.rows: dict[str, Rows] = {}  # sink_postgres: the epoch's rows per sink
        self.late: Counter[str] = Counter()  # late records by operator (not yet counted)
        self.dead: list[DeadRecord] = []
        self.shuffles: dict[str, ShuffleOut] = {}  # by key_by name (the chain adds them)
        self._batch: list[Any] | None = None
        self._ids: dict[int, int] | None = None

    # -- state ------------------------------------------------------------------------------

    def load(self, node: Node, text: str) -> Any:
        """The stored value of ``node``'s key ``text`` (`UNSET`: none)."""
        (raw,) = self.reader.get_many([state_key(node, text)])
        return UNSET if raw is None else load_value(raw)

    def filtered(self) -> ExpiredFilter:
        """The reads of an operator with a TTL: the keys expired this epoch read as missing."""
        return ExpiredFilter(self.state, self.expired)

    def expire(self, keys: list[bytes]) -> None:
        """State keys expired: missing to every read until the flush deletes them."""
        self.expired.update(keys)
        if not isinstance(self.reader, ExpiredFilter):  # no filter until a key expires
            self.reader = self.filtered()

    def encode(self, node: Node, text: str, value: Any) -> bytes | None:
        """Key ``text``'s state value as bytes; None (and a dead record, the value, its error
        naming the key) if it cannot be stored."""
        try:
            return sink_value(value)
        except RecordError as exc:
            error = RecordError(f"state of key {_key_shown(text)} not stored: {exc}", exc.reason)
            self.fail(node, error, value)
            return None

    def encode_all(self, node: Node, items: list[tuple[str, Any]]) -> list[bytes | None]:
        """`encode` of each ``(key text, value)``, in C loops over all of them where every
        value has its bytes (`codec.sink_values`: an epoch's plain values are looked over
        once, not each on its own), else one by one."""
        try:
            return list(sink_values([value for _, value in items]))
        except RecordError:
            return [self.encode(node, text, value) for text, value in items]

    # -- dead records -----------------------------------------------------------------------

    def source_batch(self, values: list[Any] | None) -> None:
        """The source values a batch starts from (None: its end): a dead record that is one
        of them names it."""
        self._batch, self._ids = values, None

    def fail(self, node: Node, exc: Exception, value: Any) -> None:
        """``value`` failed in ``node`` with ``exc``: a dead record."""
        origin = None
        if self._batch is not None:  # a source value of this batch, perhaps
            ids = self._ids
            if ids is None:
                ids = self._ids = {}
                for i, v in enumerate(self._batch):
                    ids.setdefault(id(v), i)
            origin = ids.get(id(value))
        self.dead.append(dead_record(node.name, exc, value, origin))

    def take_dead(self) -> list[DeadRecord]:
        dead, self.dead = self.dead, []
        return dead

    # -- output -----------------------------------------------------------------------------

    def take_sinks(self) -> SinkRecords:
        sinks, self.sinks = self.sinks, {}
        return sinks

    def take_headed(self) -> dict[str, list[Headed]]:
        headed, self.headed = self.headed, {}
        return headed

    def take_rows(self) -> dict[str, Rows]:
        rows, self.rows = self.rows, {}
        return rows

    @property
    def output_buffered(self) -> int:
        """Records waiting to be taken (sinks, shuffles), and dead records."""
        return (
            sum(map(len, self.shuffles.values()))
            + sum(map(len, self.sinks.values()))
            + sum(map(len, self.headed.values()))
            + len(self.dead)
        )


def _key_shown(text: str) -> str:
    """A key, as a dead record's error shows it."""
    try:
        return shown(key_of(text))
    except Exception:  # noqa: BLE001 - a key's text that does not decode: as it is
        return shown(text)
