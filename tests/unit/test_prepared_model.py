"""Model check of the PostgreSQL sink's two-phase commit (`processor.sinks.postgres.prepared`).

A model of one task's writer: a Kafka transactional id (``init_transactions`` fences older
producers; a commit is atomic and names its checkpoint), a PostgreSQL database (prepared
transactions that survive crashes, the fence row and its lock), and incarnations of the task
as step machines doing what `processor.sinks.postgres.writer.PostgresWriter` does: restore
(fence in Kafka, read the committed checkpoint, resolve with the real `prepared.resolve`,
raise the fence, resolve again), then epochs (check the fence, write, PREPARE, perhaps be
declined, commit in Kafka, COMMIT PREPARED). A random scheduler interleaves them with crashes
and zombies (an incarnation that goes on after its successor started), over thousands of
seeds. The table is an append log, not an upsert, so a duplicate shows.

Properties: at every step the committed rows are each input record at most once, all below
Kafka's committed position (never ahead of Kafka); at the end (a last incarnation runs
alone) every record is in the table exactly once and no prepared transaction is left.

The model has teeth: the broken variants at the bottom (commit everything at restore, an
off-by-one, no fence in the database) each fail on some seeds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

import pytest

from processor.sinks.postgres import prepared

WRITER = "job.count.0.pg"
RECORDS = 24

Resolve = Callable[[str, list[str], int, int], prepared.Resolution]


@dataclass
class Kafka:
    epoch: int = 0  # the producer epoch: init_transactions raises it
    position: int = 0  # committed input offset
    checkpoint: int = 0  # the checkpoint its metadata names


@dataclass
class Postgres:
    table: list[int] = field(default_factory=list)
    prepared: dict[str, list[int]] = field(default_factory=dict)
    fence: int = 0
    lock: object = None  # the fence row's holder: an open transaction or a prepared gid


@dataclass
class World:
    kafka: Kafka = field(default_factory=Kafka)
    pg: Postgres = field(default_factory=Postgres)
    next_id: int = 1  # the coordinator's checkpoint ids


class Crash(Exception):
    """The incarnation's process dies (PREPARE of a gid in use is an error: it fails)."""


Steps = Generator[None, None, None]


def incarnation(
    world: World,
    me: object,
    rng: random.Random,
    resolve: Resolve,
    fence: bool,
    raise_any: bool,
) -> Steps:
    kafka, pg = world.kafka, world.pg
    seen = pg.fence  # (1) before the producer starts
    yield
    kafka.epoch += 1  # (2) init_transactions: every older producer of this id is fenced
    mine = kafka.epoch
    yield
    committed, position = kafka.checkpoint, kafka.position  # (3)

    def resolve_prepared() -> Steps:  # (4)
        decision = resolve(WRITER, list(pg.prepared), committed, seen)
        for name in decision.commit:
            yield
            if name in pg.prepared:  # else resolved meanwhile (by its zombie)
                pg.table.extend(pg.prepared.pop(name))
                if pg.lock == name:
                    pg.lock = None
        for name in decision.rollback:
            yield
            if pg.prepared.pop(name, None) is not None and pg.lock == name:
                pg.lock = None

    while True:
        yield from resolve_prepared()
        yield
        if pg.lock is None:  # (5), else lock_timeout: resolve again, try again
            if raise_any or pg.fence == seen:
                pg.fence += 1
                my_fence = pg.fence
                break
            return  # a newer incarnation raised it: this one is stale
    carried: list[int] = []
    while position < RECORDS or carried:
        n = world.next_id
        world.next_id += 1
        yield
        read = min(RECORDS, position + rng.randint(0, 3))
        rows = carried + list(range(position, read))
        position = read
        if rows:
            while pg.lock is not None:  # the fence row's UPDATE waits for its lock
                yield
            if fence and pg.fence != my_fence:
                return  # fenced in the database: rolls back, never prepares
            pg.lock = me  # the open transaction holds the row
            yield
            name = prepared.gid(WRITER, my_fence, n)
            if name in pg.prepared:
                raise Crash  # PREPARE TRANSACTION of a gid in use
            pg.prepared[name] = rows
            pg.lock = name
            yield
            if rng.random() < 0.15:  # declined: ROLLBACK PREPARED, rows into the next epoch
                pg.prepared.pop(name, None)
                if pg.lock == name:
                    pg.lock = None
                carried = rows
                continue
        if kafka.epoch != mine:
            return  # fenced in Kafka: the task fails, its prepared one stays
        kafka.position, kafka.checkpoint = position, n
        carried = []
        yield
        if rows:
            name = prepared.gid(WRITER, my_fence, n)
            if name in pg.prepared:
                pg.table.extend(pg.prepared.pop(name))
                if pg.lock == name:
                    pg.lock = None
        yield


def check_invariant(world: World) -> None:
    table = world.pg.table
    assert len(table) == len(set(table)), f"duplicate rows: {sorted(table)}"
    assert all(r < world.kafka.position for r in table), "a row committed ahead of Kafka"


def simulate(
    seed: int, resolve: Resolve = prepared.resolve, fence: bool = True, raise_any: bool = False
) -> World:
    rng = random.Random(seed)
    world = World()
    live: dict[object, Steps] = {}

    def start() -> None:
        me = object()
        live[me] = incarnation(world, me, rng, resolve, fence, raise_any)

    def kill(me: object) -> None:
        live.pop(me).close()
        if world.pg.lock is me:  # its connection closes: the open transaction rolls back
            world.pg.lock = None

    start()
    for _ in range(400):
        roll = rng.random()
        if roll < 0.03 and len(live) < 3:
            start()  # the old one goes on, for a while: a zombie
        elif roll < 0.06 and live:
            kill(rng.choice(list(live)))
            if not live:
                start()
        elif live:
            me = rng.choice(list(live))
            try:
                next(live[me])
            except (StopIteration, Crash):
                kill(me)
        check_invariant(world)
        if not live:
            start()
    for me in list(live):
        kill(me)
    start()  # the last incarnation, alone, to the end
    (me,) = live
    for _ in range(10_000):
        try:
            next(live[me])
        except StopIteration:
            break
        check_invariant(world)
    return world


def finished(world: World) -> bool:
    return sorted(world.pg.table) == list(range(RECORDS)) and not world.pg.prepared


@pytest.mark.parametrize("block", range(20))
def test_every_record_once_in_the_table_and_nothing_left_prepared(block: int) -> None:
    for seed in range(block * 100, block * 100 + 100):
        world = simulate(seed)
        assert sorted(world.pg.table) == list(range(RECORDS)), f"seed {seed}"
        assert not world.pg.prepared, f"seed {seed}: left prepared: {world.pg.prepared}"


def _fails(seeds: range, **broken: object) -> int:
    failures = 0
    for seed in seeds:
        try:
            world = simulate(seed, **broken)  # type: ignore[arg-type]
        except AssertionError:
            failures += 1
            continue
        failures += not finished(world)
    return failures


def test_committing_every_prepared_one_at_restore_is_caught() -> None:
    def commit_all(
        writer: str, found: list[str], committed: int, fence: int
    ) -> prepared.Resolution:
        decision = prepared.resolve(writer, found, committed, fence)
        return prepared.Resolution(decision.commit + decision.rollback, ())

    assert _fails(range(300), resolve=commit_all) > 0


def test_rolling_back_the_committed_checkpoint_is_caught() -> None:
    def off_by_one(
        writer: str, found: list[str], committed: int, fence: int
    ) -> prepared.Resolution:
        return prepared.resolve(writer, found, committed - 1, fence)

    assert _fails(range(300), resolve=off_by_one) > 0


def test_resolving_a_newer_incarnations_transactions_is_caught() -> None:
    """A stale restorer, with an old committed checkpoint, must leave a newer one's alone."""

    def every_fence(
        writer: str, found: list[str], committed: int, fence: int
    ) -> prepared.Resolution:
        return prepared.resolve(writer, found, committed, 2**62)

    assert _fails(range(2000), resolve=every_fence) > 0


def test_raising_a_fence_that_moved_is_caught() -> None:
    assert _fails(range(2000), raise_any=True) > 0


def test_no_fence_in_the_database_is_caught() -> None:
    assert _fails(range(1000), fence=False) > 0


def test_gid_and_its_parts() -> None:
    name = prepared.gid(WRITER, 3, 17)
    assert prepared.parse(WRITER, name) == (3, 17)
    assert prepared.parse("job.count.0.p", name) is None  # a prefix, not the writer
    assert prepared.parse(WRITER, WRITER + ".x.1") is None
    assert prepared.parse("job.count.0", name) is None  # sink "pg.3" is another writer's
    with pytest.raises(ValueError):
        prepared.gid("w" * 200, 1, 1)


def test_a_foreign_gid_is_skipped_not_raised() -> None:
    """'²' is a digit to str.isdigit, not to int(): such a gid is someone else's."""
    found = [prepared.gid(WRITER, 1, 4), WRITER + ".1.4\u00b2", WRITER + ".\u00b2.4"]
    assert prepared.parse(WRITER, found[1]) is None
    assert prepared.resolve(WRITER, found, 4, 1) == prepared.Resolution((found[0],), ())
    assert prepared.writer_of(found[1]) is None


def test_the_writers_a_task_replaces_are_its_own_only() -> None:
    """A task's writers of sinks it no longer has: same job and task, another sink; not
    another task's, even one whose stage name starts like this task's id."""
    stages = ["lines", "lines.key_by", "lines.key_by-0.x"]
    writers = [
        "wc.lines.key_by-0.lines.key_by.count.sink_postgres",  # renamed: replaced
        "wc.lines.key_by-0.lines.key_by.count.map.sink_postgres",  # its current writer
        "wc.lines.key_by-1.lines.key_by.count.sink_postgres",  # another task
        "wc.lines.key_by-0.x-0.sink",  # stage lines.key_by-0.x's task
        "old.lines.key_by-0.lines.key_by.count.sink_postgres",  # another job
    ]
    current = [writers[1]]
    assert prepared.replaced("wc", "lines.key_by-0", current, stages, writers) == [writers[0]]
    assert prepared.replaced("old", "lines.key_by-0", current, stages, writers) == [writers[4]]
    assert prepared.task_of("wc", writers[3], stages) == "lines.key_by-0.x-0"
