"""Stage chains wired together in memory: the engine's dataflow without Kafka, checked against
the reference run, and each operator's edge cases."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from processor import Pipeline
from processor.engine.chain import StageChain
from processor.engine.shuffle_out import MAX_RECORD_BYTES
from processor.models.records import decode_shuffle
from processor.plan.load import load_pipeline
from processor.plan.stages import Plan, plan
from processor.testing import MemoryState
from tests.reference import run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


DictBackend = MemoryState  # the state backend of the tests (and of processor.testing)


def restored(
    chain: StageChain, make: Callable[[], StageChain], data: Mapping[bytes, bytes]
) -> StageChain:
    """What a keyed task's restore does to ``chain`` (already flushed): a new chain from
    ``make`` over the same state ``data``, with its watermark and every timer (and TTL
    deadline) rebuilt from the state."""
    watermark = chain.watermark
    new = make()
    new.watermark = watermark
    for prefix in new.timed_operators():
        new.restore_timers(prefix, sorted((k, v) for k, v in data.items() if k.startswith(prefix)))
    return new


def simulate(
    compiled: Plan, inputs: dict[str, list[bytes]], partitions: int, batch: int, seed: int
) -> dict[str, list[tuple[bytes | None, bytes]]]:
    """Every stage's tasks, stage after stage, with flushes (checkpoints) at random points."""
    rng = random.Random(seed)
    sinks: dict[str, list[tuple[bytes | None, bytes]]] = {}
    # Per stage, per task: the batches it will read (shuffle bodies, or decoded values).
    queues: dict[str, list[list[Any]]] = {}
    for stage in compiled.stages:
        source = stage.source
        if source is not None:
            raw = inputs[source.topic]
            values = [json.loads(r) if source.value_format == "json" else r.decode() for r in raw]
            split = [values[i::partitions] for i in range(partitions)]
            queues[stage.name] = [
                [split[i][j : j + batch] for j in range(0, len(split[i]), batch)]
                for i in range(partitions)
            ]
        tasks = queues.get(stage.name, [[] for _ in range(partitions)])
        chains = [
            StageChain(
                compiled,
                stage,
                i,
                DictBackend(),
                dict.fromkeys(compiled_names(compiled), partitions),
            )
            for i in range(len(tasks))
        ]
        for chain, work in zip(chains, tasks, strict=True):
            for item in work:
                if stage.is_source:
                    chain.values(item)
                else:
                    chain.shuffled(item)
                if rng.random() < 0.3:
                    chain.flush()
            chain.flush()
            for topic, records in chain.take_sinks().items():
                sinks.setdefault(topic, []).extend(records)
            for name, out in chain.shuffles.items():
                target = queues.setdefault(name, [[] for _ in range(partitions)])
                for p, value in out.take(chain.channel):
                    channel, body = decode_shuffle(value)
                    assert channel == chain.channel
                    target[p].append(body)
        for target in queues.values():
            for work in target:
                rng.shuffle(work)  # channels interleave in any order in a shuffle partition
    return sinks


def compiled_names(compiled: Plan) -> list[str]:
    return [s.name for s in compiled.stages if not s.is_source]


def _inputs(topic_lines: dict[str, list[str]]) -> dict[str, list[bytes]]:
    return {t: [line.encode() for line in lines] for t, lines in topic_lines.items()}


LINES = [
    " ".join(
        random.Random(i).choice(["Cat", "cab", "dog", "Door", "egg", "éclair", "a1", "1"])
        for _ in range(12)
    )
    for i in range(300)
]


@pytest.mark.parametrize("partitions", [1, 3])
@pytest.mark.parametrize("example", ["wordcount", "two_shuffles"])
def test_text_examples_match_the_reference(example: str, partitions: int) -> None:
    pipeline, compiled = load_pipeline(str(EXAMPLES / f"{example}.py"))
    inputs = _inputs({"lines": LINES})
    expected = run(pipeline, inputs)
    got = simulate(compiled, inputs, partitions, batch=7, seed=partitions)
    for topic, output in expected.sinks.items():
        if not output.changelog:
            assert Counter(got[topic]) == output.multiset(), topic
            continue
        assert dict(got[topic]) == output.final(), topic
        values: dict[bytes | None, list[int]] = {}
        for key, value in got[topic]:
            values.setdefault(key, []).append(int(value))
        assert all(v == sorted(set(v)) for v in values.values()), "not strictly increasing"


def test_json_examples_match_the_reference() -> None:
    rng = random.Random(3)
    orders = [
        {
            "user": rng.choice("abcd"),
            "amount": rng.randrange(1, 50),
            "status": rng.choice(["paid", "open"]),
        }
        for _ in range(500)
    ]
    readings = [
        {"sensor": f"s{rng.randrange(5)}", "value": rng.randrange(-20, 40)} for _ in range(500)
    ]
    for name, topic, records in [
        ("revenue", "orders", orders),
        ("sensor_average", "readings", readings),
    ]:
        pipeline, compiled = load_pipeline(str(EXAMPLES / f"{name}.py"))
        inputs = {topic: [json.dumps(r).encode() for r in records]}
        expected = run(pipeline, inputs)
        got = simulate(compiled, inputs, 2, batch=11, seed=1)
        for sink, output in expected.sinks.items():
            assert dict(got[sink]) == output.final(), sink


def test_plain_streams_reach_sinks_record_by_record_and_failures_are_dead() -> None:
    p = Pipeline()
    nums = p.source("n", value="json")
    nums.map(lambda v: 10 // v).sink("tenths")  # 0 raises: only that record is dead
    nums.key_by(lambda v: [v % 2]).map(lambda v: {"v": v}).sink("by-parity")  # list keys
    compiled = plan(p)
    source = compiled.stages[0]
    chain = StageChain(compiled, source, 0, DictBackend(), {"n.key_by": 2})
    chain.values([1, 0, 5, 2])
    chain.flush()
    assert chain.take_sinks() == {"tenths": [(None, b"10"), (None, b"2"), (None, b"5")]}
    assert [(d.operator, d.error, d.value) for d in chain.take_dead()] == [
        ("n.map", "ZeroDivisionError: integer division or modulo by zero", b"0")
    ]
    keyed = compiled.stage("n.key_by")
    downstream = StageChain(compiled, keyed, 0, DictBackend(), {"n.key_by": 2})
    for _, value in chain.shuffles["n.key_by"].take(0):
        downstream.shuffled(decode_shuffle(value)[1])
    records = downstream.take_sinks()["by-parity"]
    assert sorted(records) == [
        (b"[0]", b'{"v":0}'),
        (b"[0]", b'{"v":2}'),
        (b"[1]", b'{"v":1}'),
        (b"[1]", b'{"v":5}'),
    ]


def test_aggregations_emit_once_per_key_and_flush_and_keep_state_across_chains() -> None:
    p = Pipeline()
    p.source("w").key_by(lambda w: w).count().sink("c")
    compiled = plan(p)
    stage = compiled.stages[1]
    state = DictBackend()
    chain = StageChain(compiled, stage, 0, state, {stage.name: 1})
    chain.shuffled({"a": 2, "b": 1})
    chain.shuffled({"a": 3})
    assert chain.take_sinks() == {}  # nothing before the flush
    chain.flush()
    assert sorted(chain.take_sinks()["c"]) == [(b"a", b"5"), (b"b", b"1")]
    # A new incarnation on the same state (a restore) continues from it.
    again = StageChain(compiled, stage, 0, state, {stage.name: 1})
    again.shuffled({"a": 1})
    again.flush()
    assert again.take_sinks() == {"c": [(b"a", b"6")]}


def test_quiet_records_update_state_without_output() -> None:
    p = Pipeline()
    p.source("w").key_by(lambda w: w).count().sink("c")
    compiled = plan(p)
    stage = compiled.stages[1]
    chain = StageChain(compiled, stage, 0, DictBackend(), {stage.name: 1})
    chain.shuffled({"a": 2, "b": 1}, quiet=True)  # the replay: committed already
    chain.flush(quiet=True)
    assert chain.take_sinks() == {}  # quiet, but in the state
    chain.shuffled({"a": 1})
    chain.flush()
    assert chain.take_sinks() == {"c": [(b"a", b"3")]}
    chain.shuffled({"b": 1})
    chain.flush()
    assert chain.take_sinks() == {"c": [(b"b", b"2")]}


def _keyed_chain(p: Pipeline, state: DictBackend) -> StageChain:
    """A task of ``p``'s keyed stage (its only partition) over ``state``."""
    compiled = plan(p)
    stage = compiled.stages[1]
    return StageChain(compiled, stage, 0, state, {stage.name: 1})


def test_process_state_get_set_delete() -> None:
    p = Pipeline()

    def toggle(value: str, state: Any) -> list[str]:
        if state.get() is None:
            state.set({"seen": value})
            return [f"on:{value}"]
        state.delete()
        return [f"off:{value}"]

    p.source("w").key_by(lambda w: w[0]).process(toggle).sink("t")
    state = DictBackend()
    chain = _keyed_chain(p, state)
    chain.shuffled([["a", "ant"], ["a", "axe"], ["b", "bee"]])
    chain.flush()
    chain2 = _keyed_chain(p, state)
    chain2.shuffled([["a", "ape"], ["b", "bat"]])
    assert chain.take_sinks()["t"] + chain2.take_sinks()["t"] == [
        (b"a", b'"on:ant"'),
        (b"a", b'"off:axe"'),
        (b"b", b'"on:bee"'),
        (b"a", b'"on:ape"'),
        (b"b", b'"off:bat"'),
    ]


def test_a_state_value_the_store_refuses_is_dead_at_the_epochs_end_naming_its_key() -> None:
    """``state.set`` keeps a value in memory; the epoch's end stores it as JSON
    (`codec.sink_value`). A key whose value then is no JSON (a set) is a dead record naming
    the key, which keeps its state of the last checkpoint; a value set in between and
    replaced by a storable one is no loss: what is stored is checked."""
    p = Pipeline()

    def keep(value: str, state: Any) -> list[list[Any]]:
        before = state.get()
        state.set({value} if value.endswith("!") else value)
        return [[sorted(before) if isinstance(before, set) else before, value]]

    p.source("w").key_by(lambda w: w[0]).process(keep).sink("t")
    state = DictBackend()
    epochs = [
        [["a", "ant"], ["b", "bee"]],
        [["a", "ape!"], ["a", "axe"], ["b", "bat!"]],
        [["a", "asp"], ["b", "bun"]],
    ]
    outputs, dead = [], []
    for records in epochs:
        chain = _keyed_chain(p, state)
        chain.shuffled(records)
        chain.flush()
        outputs += [json.loads(v) for _, v in chain.take_sinks()["t"]]
        dead += [(d.operator, d.error) for d in chain.take_dead()]
    assert outputs == [
        [None, "ant"],
        [None, "bee"],
        ["ant", "ape!"],
        [["ape!"], "axe"],
        ["bee", "bat!"],
        ["axe", "asp"],
        ["bee", "bun"],
    ]
    [(operator, error)] = dead
    assert operator == "w.key_by.process"
    assert "state of key 'b' not stored" in error and "not JSON-encodable" in error, error


def test_large_flushes_are_split_below_the_record_limit() -> None:
    p = Pipeline()
    p.source("w").key_by(lambda w: w).count().sink("c")
    compiled = plan(p)
    chain = StageChain(compiled, compiled.stages[0], 3, DictBackend(), {compiled.stages[1].name: 2})
    words = [f"word-{i:06d}-" + "x" * 40 for i in range(40_000)]
    chain.values(words)
    records = chain.shuffles[compiled.stages[1].name].take(3)
    assert len(records) > 2
    assert all(len(v) <= MAX_RECORD_BYTES for _, v in records)
    total = Counter[str]()
    for _, value in records:
        channel, body = decode_shuffle(value)
        assert channel == 3 and isinstance(body, dict)
        total.update(body)
    assert total == Counter(words)


def test_keys_of_different_types_stay_apart() -> None:
    p = Pipeline()
    p.source("n", value="json").key_by(lambda v: v).count().sink("c")
    compiled = plan(p)
    shuffle = compiled.stages[1].name
    source = StageChain(compiled, compiled.stages[0], 0, DictBackend(), {shuffle: 1})
    source.values([1, "1", 1, True, "\0x", [1]])
    keyed = StageChain(compiled, compiled.stages[1], 0, DictBackend(), {shuffle: 1})
    for _, value in source.shuffles[shuffle].take(0):
        keyed.shuffled(decode_shuffle(value)[1])
    keyed.flush()
    assert sorted(keyed.take_sinks()["c"]) == [
        (b"\x00x", b"1"),
        (b"1", b"1"),  # the string "1"
        (b"1", b"2"),  # the number 1: another key, printed the same by str()
        (b"True", b"1"),
        (b"[1]", b"1"),
    ]


def test_keys_and_values_json_cannot_encode_are_dead_not_a_failed_flush() -> None:
    p = Pipeline()
    raw = p.source("b", value="bytes")
    raw.key_by(lambda v: "k").sink("as-is")  # bytes values: not JSON
    text = raw.map(bytes.decode, name="text")
    text.key_by(lambda v: {1, 2} if v == "set" else v, name="odd-keys").count().sink("c")
    text.key_by(lambda v: "k", name="sets").aggregate(set[str](), lambda acc, v: acc | {v}).sink(
        "s"
    )
    compiled = plan(p)
    partitions = {}.fromkeys(("b.key_by", "odd-keys", "sets"), 1)
    chain = StageChain(compiled, compiled.stages[0], 0, DictBackend(), partitions)
    chain.values([b"ab", b"set"])
    taken = {name: shuffle.take(0) for name, shuffle in chain.shuffles.items()}
    assert taken["b.key_by"] == []  # both values were bytes
    assert decode_shuffle(taken["odd-keys"][0][1])[1] == {"ab": 1}  # the set key is dead
    dead = sorted((d.operator, d.error.split(":")[0]) for d in chain.take_dead())
    assert dead == [
        ("b.key_by", "value b'ab' is not JSON-encodable"),
        ("b.key_by", "value b'set' is not JSON-encodable"),
        ("odd-keys", "key {1, 2} is not JSON-encodable"),
    ]
    assert not chain.has_dead

    downstream = StageChain(compiled, compiled.stage("sets"), 0, DictBackend(), {})
    for _, value in taken["sets"]:
        downstream.shuffled(decode_shuffle(value)[1])
    downstream.flush()  # the accumulator cannot be stored: dead, and the flush goes on
    assert downstream.take_sinks() == {}
    assert [d.operator for d in downstream.take_dead()] == ["sets.aggregate"]


@pytest.mark.parametrize("combine", ["count", "aggregate", "none"])
def test_records_that_cannot_be_keyed_or_pre_aggregated_are_dead_not_fatal(combine: str) -> None:
    """A key that is not JSON, or a combiner's add() raising in the upstream stage: that
    record is dead at the same operator as in the reference run, the rest flows on."""
    p = Pipeline()
    keyed = p.source("n", value="json").key_by(lambda v: {0} if v == 0 else v % 3)
    if combine == "count":
        keyed.count().sink("out")
    elif combine == "aggregate":
        keyed.aggregate(0, lambda acc, v: acc + 10 // (v - 1), merge=lambda a, b: a + b).sink("out")
    else:
        keyed.map(lambda v: v).sink("out")
    compiled = plan(p)
    values = [3, 0, 1, 4, 7, 2, 0, 1]
    expected = run(p, {"n": [json.dumps(v).encode() for v in values]})
    assert expected.dead, "the case has no dead record"
    got = simulate(compiled, {"n": [json.dumps(v).encode() for v in values]}, 1, batch=8, seed=0)
    output = expected.sinks["out"]
    if output.changelog:
        assert dict(got["out"]) == output.final()
    else:
        assert Counter(got["out"]) == output.multiset()
    source = StageChain(compiled, compiled.stages[0], 0, DictBackend(), {"n.key_by": 1})
    source.values(values)
    dead = [(d.operator, d.error) for d in source.take_dead()]
    assert sorted(dead) == sorted(expected.dead)


@pytest.mark.parametrize("combined", [True, False])
def test_sum_refuses_what_is_not_a_number_whatever_the_order(combined: bool) -> None:
    """A string among the numbers is dead wherever it comes, so the engine's order (shuffles,
    pre-aggregation) gives the reference's sum and dead records."""
    p = Pipeline()
    keyed = p.source("n", value="json").key_by(lambda v: "k")
    (keyed if combined else keyed.map(lambda v: v)).sum().sink("out")
    compiled = plan(p)
    assert (compiled.stages[1].combiner is not None) == combined
    values = ["2", 1, True, 3, "x", 4.5, None]
    for seed in range(4):
        random.Random(seed).shuffle(values)
        inputs = {"n": [json.dumps(v).encode() for v in values]}
        expected = run(p, inputs)
        assert expected.sinks["out"].final() == {b"k": b"8.5"}
        assert sorted(e for _, e in expected.dead) == [
            "not a number: sum of '2'",
            "not a number: sum of 'x'",
            "not a number: sum of None",
            "not a number: sum of True",
        ]
        got = simulate(compiled, inputs, 2, batch=2, seed=seed)
        assert dict(got["out"]) == {b"k": b"8.5"}


@pytest.mark.parametrize("kind", ["count", "sum", "reduce"])
def test_without_the_combiner_every_record_is_shipped_and_the_result_is_the_same(
    kind: str,
) -> None:
    p = Pipeline()
    keyed = p.source("w").key_by(lambda w: str(w))
    if kind == "count":
        keyed.count().sink("c")
    elif kind == "sum":
        keyed.sum().sink("c")
    else:
        keyed.reduce(lambda a, b: a + b).sink("c")
    compiled = plan(p)
    source, stage = compiled.stages
    words: list[Any] = [1, 2, 1, 3, 1, 3] if kind == "sum" else ["a", "b", "a", "cc", "a", "cc"]
    results = {}
    for combine in (True, False):
        up = StageChain(compiled, source, 0, DictBackend(), {stage.name: 1}, combine=combine)
        up.values(words)
        up.flush()
        bodies = [decode_shuffle(v)[1] for _, v in up.shuffles[stage.name].take(0)]
        shipped = sum(len(b) for b in bodies)
        assert shipped == (3 if combine else len(words))
        assert all(isinstance(b, dict if combine else list) for b in bodies)
        down = StageChain(compiled, stage, 0, DictBackend(), {stage.name: 1})
        for body in bodies:
            down.shuffled(body)
        down.flush()
        results[combine] = sorted(down.take_sinks()["c"])
    assert results[True] == results[False]
