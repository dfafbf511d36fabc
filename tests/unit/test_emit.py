"""Aggregations with ``emit="record"``: an update per input record, in input order per key,
emitted at once; state at each flush; nothing emitted by a quiet replay; no pre-aggregation
upstream; a failing record dead with its key's sequence going on."""

from __future__ import annotations

import json
import random
from collections import Counter
from typing import Any

import pytest

from processor import Pipeline
from processor.api.streams import KeyedStream, PipelineError
from processor.engine.chain import StageChain
from processor.models.records import decode_shuffle
from processor.plan.stages import Plan, plan
from tests.reference import run
from tests.unit.test_chain import DictBackend, compiled_names, simulate


def _keyed(agg: str = "count", **kwargs: Any) -> tuple[Plan, StageChain, DictBackend]:
    """``source -> key_by(first letter) -> <agg>(emit="record") -> sink "out"``: the plan,
    a chain of the keyed stage, its state."""
    p = Pipeline()
    keyed = p.source("w", value="json").key_by(lambda v: str(v)[0])
    getattr(keyed, agg)(emit="record", **kwargs).sink("out")
    compiled = plan(p)
    state = DictBackend()
    return compiled, _chain(compiled, state), state


def _chain(compiled: Plan, state: DictBackend) -> StageChain:
    stage = compiled.stages[1]
    return StageChain(compiled, stage, 0, state, dict.fromkeys(compiled_names(compiled), 1))


def _out(chain: StageChain, topic: str = "out") -> list[tuple[str, Any]]:
    return [(k.decode() if k else "", json.loads(v)) for k, v in chain.take_sinks().get(topic, [])]


def test_emit_is_validated_and_refused_on_windows() -> None:
    keyed = Pipeline().source("w").key_by(str)
    with pytest.raises(PipelineError, match=r"^count\(emit='each'\): emit must be one of"):
        keyed.count(emit="each")  # type: ignore[arg-type]
    with pytest.raises(PipelineError, match=r"^reduce\(emit=None\)"):
        keyed.reduce(max, emit=None)  # type: ignore[arg-type]
    with pytest.raises(
        PipelineError, match=r'^sum\(emit="record"\) on a window: a window emits once'
    ):
        keyed.window(size_ms=1000).sum(emit="record")
    with pytest.raises(PipelineError) as caught:
        keyed.aggregate(0, max, emit="rec")  # type: ignore[arg-type]
    assert "\n" not in str(caught.value)


def test_a_per_record_aggregation_is_not_combined_upstream() -> None:
    def stages(emit: Any) -> Plan:
        p = Pipeline()
        keyed: KeyedStream[Any, Any] = p.source("w").key_by(str)
        keyed.count(emit=emit).sink("c")
        keyed2: KeyedStream[Any, Any] = p.source("v").key_by(str)
        keyed2.aggregate(0, lambda a, _: a + 1, lambda a, b: a + b, emit=emit).sink("a")
        return plan(p)

    assert all(s.combiner is not None for s in stages("checkpoint").stages if not s.is_source)
    per_record = stages("record")
    assert all(s.combiner is None for s in per_record.stages if not s.is_source)
    source = per_record.stages[0]
    chain = StageChain(per_record, source, 0, DictBackend(), {"w.key_by": 1, "v.key_by": 1})
    chain.values(["a", "b", "a"])
    bodies = [decode_shuffle(v)[1] for _, v in chain.shuffles["w.key_by"].take(0)]
    assert bodies == [[["a", "a"], ["b", "b"], ["a", "a"]]]  # every record, in order


@pytest.mark.parametrize(
    ("agg", "kwargs", "updates"),
    [
        ("count", {}, [1, 1, 2, 3, 2]),
        ("sum", {}, [1, 2, 13, 113, 22]),
        ("reduce", {"fn": lambda a, b: b}, [1, 2, 12, 100, 20]),
        # add() changes its accumulator in place: each update is the value at its record.
        ("aggregate", {"initial": [], "add": lambda a, v: a.append(v) or a}, None),
    ],
)
def test_one_update_per_record_in_order_at_once_and_state_at_the_flush(
    agg: str, kwargs: dict[str, Any], updates: list[Any] | None
) -> None:
    compiled, chain, state = _keyed(agg, **kwargs)
    chain.shuffled([["1", 1], ["2", 2], ["1", 12], ["1", 100]])
    if updates is None:
        updates = [[1], [2], [1, 12], [1, 12, 100], [2, 20]]
    got = _out(chain)  # before any flush: emitted as each record is folded
    assert got == list(zip(["1", "2", "1", "1"], updates[:4], strict=True))
    assert state.data == {}  # state at the flush only
    chain.flush()
    assert _out(chain) == []  # the flush emits nothing again
    assert json.loads(state.data[b"w.key_by." + agg.encode() + b"\x001"]) == updates[3]
    # A new incarnation on that state (a restore) continues each key's sequence.
    again = _chain(compiled, state)
    again.shuffled([["2", 20]])
    assert _out(again) == [("2", updates[4])]


def test_the_word_count_shape_is_still_one_update_per_key_and_checkpoint() -> None:
    p = Pipeline()
    p.source("w").key_by(str).count().sink("c")
    compiled = plan(p)
    chain = _chain(compiled, DictBackend())
    chain.shuffled({"a": 2, "b": 1})
    assert _out(chain, "c") == []
    chain.flush()
    assert sorted(_out(chain, "c")) == [("a", 2), ("b", 1)]


def test_quiet_records_update_state_and_state_downstream_but_emit_nothing() -> None:
    """The replay after a fallback restore: its updates are committed already. A per-record
    count feeding a per-checkpoint sum of its updates in the same stage: the sum's state
    follows the quiet updates too."""
    p = Pipeline()
    counts = p.source("w").key_by(str).count(emit="record")
    counts.sink("c")
    counts.sum(name="sums").sink("s")  # of 1, 2, 3, ...: n(n+1)/2 after n records
    compiled = plan(p)
    state = DictBackend()
    chain = _chain(compiled, state)
    chain.shuffled([["a", "a"], ["a", "a"], ["b", "b"]], quiet=True)
    assert _out(chain, "c") == [] and _out(chain, "s") == []
    chain.flush(quiet=True)
    assert chain.take_sinks() == {}
    chain.shuffled([["a", "a"], ["b", "b"]])
    assert _out(chain, "c") == [("a", 3), ("b", 2)]
    chain.flush()
    assert sorted(_out(chain, "s")) == [("a", 6), ("b", 3)]
    assert state.data[b"w.key_by.count\0a"] == b"3"


def test_quiet_dead_records_are_not_dead_again() -> None:
    _, chain, _ = _keyed("sum")
    chain.shuffled([["1", 1], ["x", "x"]], quiet=True)
    assert chain.take_dead() == []
    chain.shuffled([["1", 2], ["y", "y"]])
    assert _out(chain) == [("1", 3)]
    assert [d.error for d in chain.take_dead()] == ["not a number: sum of 'y'"]


def test_a_failing_reduce_is_dead_and_the_key_sequence_goes_on() -> None:
    def add_nonzero(acc: int, value: int) -> int:
        if value == 0:
            raise ValueError("zero")
        return acc + value

    compiled, chain, state = _keyed("reduce", fn=add_nonzero)
    chain.shuffled([["k", 1], ["k", 2], ["k", 0], ["k", 3]])
    assert _out(chain) == [("k", 1), ("k", 3), ("k", 6)]
    dead = chain.take_dead()
    assert [(d.operator, d.error, d.value) for d in dead] == [
        ("w.key_by.reduce", "ValueError: zero", b"0")
    ]
    chain.flush()
    again = _chain(compiled, state)
    again.shuffled([["k", 0], ["k", 4]])
    assert _out(again) == [("k", 10)]


def test_a_result_state_cannot_hold_is_dead_at_once_not_emitted() -> None:
    _, chain, state = _keyed("aggregate", initial=0, add=lambda a, b: {b} if b == 2 else a + b)
    chain.shuffled([["k", 1], ["k", 2], ["k", 3], ["j", 2]])
    assert _out(chain) == [("k", 1), ("k", 4)]
    assert [(d.error[:40], d.value) for d in chain.take_dead()] == [
        ("value {2} is not JSON-encodable: Object ", b"2")
    ] * 2
    chain.flush()
    assert state.data == {b"w.key_by.aggregate\0k": b"4"}  # none for j: its records are dead
    assert chain.take_dead() == []


def test_records_in_a_timed_pipeline_lose_their_time_at_the_aggregation() -> None:
    p = Pipeline()
    src = p.source("w", value="json", timestamp=lambda v: v["t"])
    src.key_by(lambda v: v["k"]).window(size_ms=10).count().sink("win")
    src.key_by(lambda v: v["k"], name="per").count(emit="record").sink("c")
    compiled = plan(p)
    stage = compiled.stage("per")
    chain = StageChain(
        compiled, stage, 0, DictBackend(), dict.fromkeys(compiled_names(compiled), 1)
    )
    chain.shuffled([["a", {"k": "a", "t": 5}, 5], ["a", {"k": "a", "t": 3}, 3]])
    assert _out(chain, "c") == [("a", 1), ("a", 2)]


@pytest.mark.parametrize("partitions", [1, 3])
def test_stages_in_memory_match_the_reference_sequence_per_key(partitions: int) -> None:
    """Random flush points, channels interleaving: a count's updates per key are 1..n, as in
    the reference; a last-value reduce's are its values in some order, each once."""
    p = Pipeline()
    words = p.source("w", value="json")
    words.key_by(lambda v: v["k"]).count(emit="record").sink("counts")
    words.key_by(lambda v: v["k"], name="last").reduce(lambda a, b: b, emit="record").sink("last")
    rng = random.Random(partitions)
    values = [{"k": rng.choice("abcdefg"), "n": i} for i in range(700)]
    inputs = {"w": [json.dumps(v).encode() for v in values]}
    expected = run(p, inputs)
    assert expected.sinks["counts"].updates and expected.sinks["last"].updates
    got = simulate(plan(p), inputs, partitions, batch=9, seed=partitions)
    sequences: dict[bytes | None, list[bytes]] = {}
    for key, value in got["counts"]:
        sequences.setdefault(key, []).append(value)
    assert sequences == expected.sinks["counts"].sequences()
    assert Counter(got["last"]) == expected.sinks["last"].multiset()


def test_reference_sequences_of_a_per_record_sink() -> None:
    p = Pipeline()
    keyed = p.source("w").key_by(lambda w: w[0])
    keyed.count(emit="record").sink("each")
    keyed2 = p.source("v").key_by(lambda w: w[0])
    keyed2.count(emit="record").map(lambda n: n).sum().sink("total")  # a checkpoint one after
    result = run(p, {"w": [b"ab", b"ac", b"b"], "v": [b"x"]})
    each, total = result.sinks["each"], result.sinks["total"]
    assert each.changelog and each.updates
    assert each.sequences() == {b"a": [b"1", b"2"], b"b": [b"1"]}
    assert total.changelog and not total.updates


def _records_both_ways(
    batches: list[list[list[Any]]], max_record_bytes: int = 1_000_000
) -> tuple[Any, Any]:
    """What a count(emit="record") whose only child is a plain sink writes (its records made
    in the fold loop) and what the same count through a map to that sink writes (the
    general path: updates, then `sink_batch.sink`): sink records and dead records."""
    outs = []
    for fused in (True, False):
        p = Pipeline()
        counts = p.source("w", value="json").key_by(lambda v: v).count(emit="record")
        (counts if fused else counts.map(lambda n: n)).sink("out")
        compiled = plan(p)
        stage = compiled.stages[1]
        partitions = dict.fromkeys(compiled_names(compiled), 1)
        chain = StageChain(
            compiled, stage, 0, DictBackend(), partitions, max_record_bytes=max_record_bytes
        )
        for body in batches:
            chain.shuffled(body)
        chain.flush()
        dead = [(d.operator.split(".")[-1], d.error[:30]) for d in chain.take_dead()]
        outs.append((chain.take_sinks().get("out", []), dead))
    return outs[0], outs[1]


@pytest.mark.parametrize(
    "keys",
    [
        ["a", "b", "a", "é", "a"],  # plain strings: the fold loop writes the records
        ["a", "\0" + "[1]", "a"],  # a tagged key (int keys, lists): the general path
    ],
)
def test_a_count_into_a_plain_sink_writes_what_the_general_path_writes(keys: list[str]) -> None:
    fused, general = _records_both_ways([[[k, k] for k in keys], [[k, k] for k in keys[:2]]])
    assert fused == general
    assert fused[0]  # records were written


def test_a_count_key_too_long_for_a_record_is_dead_either_way() -> None:
    keys = ["a", "x" * 80, "a"]
    fused, general = _records_both_ways([[[k, k] for k in keys]], max_record_bytes=64)
    assert fused == general
    assert fused[0] == [(b"a", b"1"), (b"a", b"2")]
    assert len(fused[1]) == 1
