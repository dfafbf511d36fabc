"""Messages on ``<job>.control`` between the coordinator and the workers (JSON, one per record).

The control topic has one partition, so every reader sees the messages in one order. It
carries no data and needs no transactions: every message is idempotent or superseded by a
newer one (assignments carry a generation, triggers a checkpoint id, heartbeats a time).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError

from processor.models.limits import (
    INT64_MAX,
    MAX_CLOCK_SKEW_S,
    MAX_ID,
    MAX_SECONDS,
    MAX_WALL_TIME_S,
)

# A field this version does not know makes a message invalid, not half-read.
_STRICT = ConfigDict(extra="forbid")

# Every number is range-checked (issue 41, item 3): a message out of range decodes to None,
# as one of the wrong type does. -1: a failed task's checkpoint, "none".
Id = Annotated[int, Field(ge=-1, le=MAX_ID)]
Count = Annotated[int, Field(ge=0, le=INT64_MAX)]
Offset = Annotated[int, Field(ge=-INT64_MAX - 1, le=INT64_MAX)]
Millis = Annotated[int, Field(ge=-MAX_ID, le=MAX_ID)]  # an event time's watermark
Tasks = Annotated[int, Field(ge=0, le=1 << 20)]  # partitions, tasks of a stage
Seconds = Annotated[float, Field(ge=0.0, le=MAX_SECONDS, allow_inf_nan=False)]
WallTime = Annotated[float, Field(ge=0.0, le=MAX_WALL_TIME_S, allow_inf_nan=False)]


@dataclass(frozen=True)
class TaskStatus:
    __pydantic_config__ = _STRICT

    state: str  # starting | running | failed | stopped (PROCESSOR_ON_ERROR=stop)
    checkpoint: Id  # last committed checkpoint id of the task
    reason: str = ""  # why it failed for good or stopped (it is not restarted)


@dataclass(frozen=True)
class Heartbeat:
    __pydantic_config__ = _STRICT

    worker: str
    incarnation: str
    tasks: dict[str, TaskStatus] = field(default_factory=dict)
    kind: Literal["heartbeat"] = "heartbeat"


@dataclass(frozen=True)
class Assignment:
    __pydantic_config__ = _STRICT

    generation: Id
    input_partitions: Tasks
    tasks: dict[str, str]  # task id -> worker id
    coordinator: str = ""  # incarnation of the coordinator that made it
    # Tasks per stage: a keyed task's input channels are the tasks of the stage upstream.
    stages: dict[str, Tasks] = field(default_factory=dict)
    kind: Literal["assignment"] = "assignment"


@dataclass(frozen=True)
class Trigger:
    __pydantic_config__ = _STRICT

    checkpoint: Id
    triggered_at: float
    kind: Literal["trigger"] = "trigger"
    # The input is done and the job drains (``--drain``): at this checkpoint every source
    # ends event time (`processor.engine.time.END_OF_TIME`), so every window and timer fires.
    drain: bool = False


@dataclass(frozen=True)
class Completed:
    """Checkpoint ``checkpoint`` completed: every task committed it, so every barrier of it is
    visible in every shuffle partition. A source writes its next epoch into the shuffles
    early (its buffers past ``flush_keys``) only after the checkpoint it committed last has
    completed: an open transaction hides from read_committed readers every record after its
    first one, another source's barrier included (processor/worker/source.py)."""

    __pydantic_config__ = _STRICT

    checkpoint: Id
    kind: Literal["completed"] = "completed"


@dataclass(frozen=True)
class Ack:
    """Task ``task`` committed its transaction of checkpoint ``checkpoint``."""

    __pydantic_config__ = _STRICT

    task: str
    checkpoint: Id
    worker: str
    records_in: Count  # records processed in the epoch that this checkpoint closes
    records_out: Count
    lag: Count  # records left in the task's inputs when the barrier was handled
    positions: dict[str, Offset]  # input partition (or channel) -> committed position
    state_bytes: Count = 0  # full size of the snapshot
    uploaded_bytes: Count = 0  # what this checkpoint copied (incremental)
    alignment_s: Seconds = 0.0
    # The task thread's time on the checkpoint's synchronous part (flush of the epoch's
    # output, barriers, RocksDB checkpoint, waits for the previous checkpoint): processing
    # stops for this long. Upload and commit run in the background.
    sync_s: Seconds = 0.0
    sync_cpu_s: Seconds = 0.0  # the CPU time of it (sync_s less waits for the GIL and the network)
    flush_cpu_s: Seconds = 0.0  # of which: writing the epoch's output (and, keyed, its state)
    # The task thread's CPU time from the previous barrier to this one: over the time between
    # the two checkpoints, how busy the task was (the status page's busy %); 0 at the first.
    busy_cpu_s: Seconds = 0.0
    upload_s: Seconds = 0.0
    commit_s: Seconds = 0.0  # the commit round trip, in the background
    snapshot: str = ""  # a keyed task's snapshot owner: (checkpoint, snapshot) names it
    # The task's event-time watermark at the barrier (ms since the epoch), in a timed job.
    watermark_ms: Millis | None = None
    kind: Literal["ack"] = "ack"


@dataclass(frozen=True)
class Decline:
    __pydantic_config__ = _STRICT

    task: str
    checkpoint: Id
    reason: str
    kind: Literal["decline"] = "decline"


@dataclass(frozen=True)
class Lease:
    """The coordinator ``incarnation`` holds the job's lease (runtime/lease.py), renewed at
    ``renewed_at`` (its wall clock, seconds)."""

    __pydantic_config__ = _STRICT

    incarnation: str
    renewed_at: WallTime
    kind: Literal["lease"] = "lease"


@dataclass(frozen=True)
class Endpoint:
    """Worker ``worker`` serves its queryable state (``/state/...``) at ``url``, the address
    others reach its metrics port at. Sent at its start and again every few heartbeats, so
    that a restarted coordinator learns it; only with ``PROCESSOR_STATE_API=on``.

    A coordinator of an earlier version does not know the kind: it skips and counts it
    (``internal.SkippedRecords``), as any message it cannot read.
    """

    __pydantic_config__ = _STRICT

    worker: str
    url: str
    kind: Literal["endpoint"] = "endpoint"


Message = Heartbeat | Assignment | Trigger | Completed | Ack | Decline | Lease | Endpoint


def encode(message: Message) -> bytes:
    return json.dumps(asdict(message), separators=(",", ":")).encode()


_MESSAGE: TypeAdapter[Message] = TypeAdapter(Annotated[Message, Field(discriminator="kind")])


def decode(raw: bytes) -> Message | None:
    """The message, or None for anything else: an unknown kind (a newer version), a field of
    the wrong type, garbage. Strict: ``"checkpoint": "3"`` is not a checkpoint id."""
    try:
        return _MESSAGE.validate_json(raw, strict=True)
    except ValidationError:
        return None


def ahead_of(message: Message, now_s: float) -> bool:
    """Whether ``message`` names a time further ahead of ``now_s`` (the reader's wall clock)
    than `MAX_CLOCK_SKEW_S`: no live process of the job sends that. An assignment's
    generation is its coordinator's wall clock at start, in ms, plus one per change; a
    lease renewal carries its coordinator's wall clock.

    >>> ahead_of(Lease("c1", 1_000.0), now_s=1_000.0)
    False
    >>> ahead_of(Assignment(10**15, 1, {}), now_s=1_700_000_000.0)
    True
    """
    if isinstance(message, Assignment):
        return message.generation > (now_s + MAX_CLOCK_SKEW_S) * 1000
    if isinstance(message, Lease):
        return message.renewed_at > now_s + MAX_CLOCK_SKEW_S
    return False
