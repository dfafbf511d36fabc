"""Two-phase commit into an external database: what becomes of a task's prepared transactions.

A task writing into a database (`processor.sinks.postgres.writer`) prepares one database
transaction per epoch, named by `gid`, before its Kafka transaction for that checkpoint
commits, and commits the prepared one once Kafka's has. Kafka's transaction is the decision.
This module holds the decision a restarting task takes, with no I/O; and
`tests/unit/test_prepared_model.py` model-checks it with crashes, zombies and declined
checkpoints (each broken variant of the argument below fails there).

Kafka fences a zombie's transactions, not its database writes, so the database holds a fence
too: a row per writer (job, task, sink) with a number each incarnation raises at restore.

- **Epoch n.** One transaction: update the writer's fence row where the number is still its
  own (else it is fenced: roll back), write the rows, ``PREPARE TRANSACTION`` named
  ``<writer>.<fence>.<n>``; commit Kafka's transaction n; ``COMMIT PREPARED``. The row lock
  lasts until the prepared transaction ends, so a writer has at most one transaction open
  or prepared, and no fence can be raised while it has.
- **Restore.** (1) read the fence F; (2) ``init_transactions``, which fences every older
  producer and returns once their transactions are complete; (3) read the checkpoint c the
  committed offsets name; (4) resolve every prepared transaction with a fence <= F: commit
  if its n <= c, else roll back; (5) raise the fence from F to F+1, waiting at most a
  moment for the row lock (if a transaction prepared meanwhile holds it: back to 4). If the
  fence is no longer F, a newer incarnation raised it: this one is stale and fails.
- **Why (4) commits exactly what Kafka committed.** A transaction with fence f <= F was
  prepared by an incarnation that raised f, hence started its producer, before (1), hence
  before (2): it is fenced in Kafka, and its transaction n committed there iff n <= c (it
  prepares n only after its previous epoch committed, and nobody else's epoch commits while
  it holds the fence row).
- **Why it touches nobody newer.** A newer incarnation raised its fence after starting its
  producer, after ours, after (1): its fence is > F, and (4) leaves its transactions alone.
  A stale restorer acting on an old c would otherwise roll back what Kafka just committed.
- **Why a zombie cannot write after (5).** Its fence update waits for the raise, then finds
  a number that is not its own.
- **Writers it replaced.** A sink renamed or removed leaves writers of the same task under
  other names (`replaced`). The task's restore runs (1), (4) and (5) for them too: they
  used its Kafka transactional id, so (2) fenced them and (3) is their decision as well.
  A job started from another's savepoint has another transactional id: the old job's
  writers are resolved by a restore of the old task that runs nothing, under the old name
  (`processor.worker.postgres_orphans`).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

# PostgreSQL's limit on a transaction identifier (GID) is 200 bytes.
MAX_GID_BYTES = 200
# A writer's name leaves room in a gid for ".<fence>.<checkpoint>" (up to 40 digits).
_MAX_OWNER_BYTES = 160
# ASCII digits only: str.isdigit takes '²', which int() refuses.
_NUMBER = re.compile(r"[0-9]+")


def owner(job: str, task: str, sink: str) -> str:
    """Who a prepared transaction belongs to: one writer per job, task and sink. A name too
    long for a transaction id keeps its start and ends in a hash of the whole.

    >>> len(owner("j" * 200, "t-0", "s").encode())
    160
    """
    name = f"{job}.{task}.{sink}"
    if len(name.encode()) <= _MAX_OWNER_BYTES:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:24]
    start = name.encode()[: _MAX_OWNER_BYTES - 25].decode(errors="ignore")
    return f"{start}~{digest}"


def gid(writer: str, fence: int, checkpoint_id: int) -> str:
    """The global transaction id of ``writer``'s epoch ending at ``checkpoint_id``, prepared
    by its incarnation with ``fence``.

    >>> gid("wc.count.0.pg", 3, 12)
    'wc.count.0.pg.3.12'
    """
    name = f"{writer}.{fence}.{checkpoint_id}"
    if len(name.encode()) > MAX_GID_BYTES:
        raise ValueError(f"transaction id {name!r} is over {MAX_GID_BYTES} bytes")
    return name


def parse(writer: str, name: str) -> tuple[int, int] | None:
    """``(fence, checkpoint)`` of ``name`` if it is one of ``writer``'s transaction ids, else
    None (another writer's, even one whose name starts like this one's)."""
    prefix = writer + "."
    if not name.startswith(prefix):
        return None
    fence, _, checkpoint = name[len(prefix) :].partition(".")
    if not _NUMBER.fullmatch(fence) or not _NUMBER.fullmatch(checkpoint):
        return None
    return int(fence), int(checkpoint)


def writer_of(name: str) -> str | None:
    """The writer of transaction id ``name``, or None if it is not one of ours.

    >>> writer_of("wc.count-0.pg.3.12"), writer_of("wc.count-0.pg.3.1²"), writer_of("x.1")
    ('wc.count-0.pg', None, None)
    """
    writer, *numbers = name.rsplit(".", 2)
    if len(numbers) != 2 or not all(_NUMBER.fullmatch(n) for n in numbers) or not writer:
        return None
    return writer


def task_of(job: str, writer: str, stages: Collection[str]) -> str | None:
    """Which task of ``job`` (``<stage>-<index>``, a stage of ``stages``) ``writer`` is of:
    its name is ``<job>.<task>.<sink>``; the longest stage wins, as stage names hold dots.

    >>> task_of("wc", "wc.lines.key_by-1.lines.key_by.count.sink_postgres", ["lines.key_by"])
    'lines.key_by-1'
    """
    if not writer.startswith(job + "."):
        return None
    rest = writer[len(job) + 1 :]
    found: str | None = None
    for stage in stages:
        if not rest.startswith(stage + "-"):
            continue
        index, dot, _ = rest[len(stage) + 1 :].partition(".")
        if dot and _NUMBER.fullmatch(index) and (found is None or len(stage) > len(found)):
            found = stage
    if found is None:
        return None
    return rest[: rest.index(".", len(found) + 1)]


def replaced(
    job: str, task: str, current: Collection[str], stages: Collection[str], writers: Iterable[str]
) -> list[str]:
    """The writers among ``writers`` that task ``task`` of job ``job`` had and has no more
    (``current``: its writers now): a sink renamed (an operator inserted before it, a new
    ``name=``) or removed. Its restore resolves their prepared transactions as its own.

    >>> replaced("wc", "s-0", ["wc.s-0.b"], ["s", "s-0.x"], ["wc.s-0.a", "wc.s-0.b", "wc.s-1.a"])
    ['wc.s-0.a']
    """
    return sorted(w for w in set(writers) if w not in current and task_of(job, w, stages) == task)


@dataclass(frozen=True)
class Resolution:
    """What to do with a writer's prepared transactions: commit these, roll back those."""

    commit: tuple[str, ...]
    rollback: tuple[str, ...]


def resolve(writer: str, prepared: list[str], committed: int, fence: int) -> Resolution:
    """Step (4) of the restore: ``prepared`` are the database's prepared transaction ids
    (everyone's), ``committed`` the checkpoint the task's committed offsets name (0: none),
    ``fence`` the writer's fence read before the producer started. Transactions of a newer
    fence are left alone.

    >>> resolve("j.t.s", ["j.t.s.1.4", "j.t.s.1.5", "j.t.s.2.6", "j.t.s2.1.9"], 4, 1)
    Resolution(commit=('j.t.s.1.4',), rollback=('j.t.s.1.5',))
    """
    mine = sorted(
        (found[1], name)
        for name in prepared
        if (found := parse(writer, name)) is not None and found[0] <= fence
    )
    return Resolution(
        commit=tuple(name for n, name in mine if n <= committed),
        rollback=tuple(name for n, name in mine if n > committed),
    )
