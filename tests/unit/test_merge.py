"""``merge``: how merges are planned into stages, what the planner refuses, the channels of
a shuffle written by several stages, and the chain running merged streams (the same result
as the reference, which merges record by record)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from processor import Meta, Pipeline
from processor.api.streams import PipelineError
from processor.engine.chain import StageChain
from processor.jobs.graph import JobGraph
from processor.models.records import decode_shuffle
from processor.plan.stages import plan
from processor.testing import Driver
from tests.unit.test_chain import DictBackend

WORDS = ["cat", "cab", "dog", "door", "egg", "a1"]


def _lines(seed: int, n: int = 200) -> list[bytes]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(6)).encode() for _ in range(n)]


def _first_sight(word: str, state: Any) -> list[str]:
    if state.get() is None:
        state.set(True)
        return [word]
    return []


def _two_sources() -> Pipeline:
    p = Pipeline()
    a = p.source("a")
    b = p.source("b")
    a.merge(b).flat_map(str.split).key_by(str).count().sink("counts")
    left = a.flat_map(str.split, name="a.words").key_by(str, name="a.by_word")
    right = b.flat_map(str.split, name="b.words").key_by(str, name="b.by_word")
    left.merge(right).process(_first_sight).sink("firsts")
    return p


def test_unkeyed_streams_of_two_sources_share_the_stages_below_the_merge() -> None:
    compiled = plan(_two_sources())
    a, b = compiled.stage("a"), compiled.stage("b")
    below = ["a.merge", "a.merge.flat_map", "a.merge.flat_map.key_by"]
    assert [n.name for n in a.nodes][:3] == below
    assert [n.name for n in b.nodes][:3] == below
    counts = compiled.stage("a.merge.flat_map.key_by")
    assert [u.name for u in counts.upstreams] == ["a", "b"]  # one input per writing stage
    assert counts.combiner is not None  # both source stages pre-aggregate


def test_keyed_streams_merged_after_their_key_bys_are_a_stage_reading_both() -> None:
    compiled = plan(_two_sources())
    merged = compiled.stage("a.by_word.merge")
    assert [n.name for n in merged.inputs] == ["a.by_word", "b.by_word"]
    assert [u.name for u in merged.upstreams] == ["a", "b"]
    assert merged.combiner is None
    assert compiled.target("b.by_word") is merged


def test_a_shuffle_written_by_two_stages_has_channels_for_each() -> None:
    graph = JobGraph("job", plan(_two_sources()))
    parallelism = {"a": 2, "b": 3, "a.merge.flat_map.key_by": 2, "a.by_word.merge": 2}
    counts = graph.plan.stage("a.merge.flat_map.key_by")
    assert graph.channels(counts, parallelism) == 5
    key_by = "a.merge.flat_map.key_by"
    assert graph.channel_base(key_by, parallelism, "a") == 0
    assert graph.channel_base(key_by, parallelism, "b") == 2
    assert graph.channel_base("b.by_word", parallelism) == 2


def test_refusals_name_the_problem() -> None:
    p = Pipeline()
    a, b = p.source("a"), p.source("b")
    with pytest.raises(PipelineError, match="not both keyed"):
        a.merge(b.key_by(str))
    with pytest.raises(PipelineError, match="merged twice"):
        a.merge(b, b)
    with pytest.raises(PipelineError, match="at least one"):
        a.merge()
    p = Pipeline()
    a, b = p.source("a"), p.source("b")
    a.key_by(str).map(str.upper).merge(b.key_by(str)).count().sink("o")
    with pytest.raises(PipelineError, match="right after their key_by"):
        plan(p)
    p = Pipeline()
    a, b = p.source("a"), p.source("b")
    ka = a.key_by(str)
    ka.merge(b.key_by(str)).count().sink("o")
    ka.count().sink("o2")
    with pytest.raises(PipelineError, match="has other uses"):
        plan(p)
    p = Pipeline()
    k = p.source("a").key_by(str)
    k.window(size_ms=10).count().merge(k.count()).sink("o")
    with pytest.raises(PipelineError, match="event time"):
        plan(p)


@pytest.mark.parametrize("partitions", [1, 3])
def test_merged_streams_give_the_direct_computation(partitions: int) -> None:
    """Through `processor.testing.Driver`: the engine's chains, shuffles written by two
    source stages into one keyed stage's channels."""
    inputs = {"a": _lines(1), "b": _lines(2)}
    driver = Driver(_two_sources(), partitions, source_partitions=partitions, checkpoint_every=7)
    driver.send_all(inputs)
    driver.finish()
    words = Counter(w for lines in inputs.values() for line in lines for w in line.split())
    counts = driver.output("counts")
    assert dict(counts) == {w.decode(): n for w, n in words.items()}
    for word in words:  # a changelog: each word's counts rise strictly
        seen = [n for w, n in counts if w == word.decode()]
        assert seen == sorted(set(seen))
    assert sorted(driver.output("firsts")) == sorted((w.decode(), w.decode()) for w in words)


def test_a_stream_merged_with_a_branch_of_itself_has_both() -> None:
    p = Pipeline()
    s = p.source("a")
    s.merge(s.filter(lambda v: v.startswith("c"))).sink("o")
    compiled = plan(p)
    chain = StageChain(compiled, compiled.stage("a"), 0, DictBackend(), {})
    chain.values(["cat", "dog"])
    assert sorted(v for _, v in chain.take_sinks()["o"]) == [b'"cat"', b'"cat"', b'"dog"']


def test_a_window_on_either_input_of_a_merge_holds_the_shuffle_s_watermark_back() -> None:
    p = Pipeline()
    k = p.source("a", timestamp=lambda v: v["t"]).key_by(lambda v: v["k"])
    windowed = k.window(size_ms=100, lateness_ms=1000).count()
    # The window on the merge's second input: not found by walking parents alone.
    k.map(lambda v: 1).merge(windowed).key_by(str).count().sink("o")
    compiled = plan(p)
    stage = compiled.stage("a.key_by")
    shuffle = compiled.stages[-1].name
    chain = StageChain(compiled, stage, 0, DictBackend(), {shuffle: 1})
    chain.advance(10_000)
    assert chain.output_watermark < 10_000 - 900


def test_metadata_passes_a_merge_and_records_made_without_it_get_their_key() -> None:

    p = Pipeline()
    k = p.source("a", key="text").key_by(lambda v, m: m.key, meta=True)
    seen: list[tuple[Any, Any]] = []

    def note(v: Any, m: Any) -> Any:
        seen.append((v, m.key))
        return v

    # A count's updates carry no metadata, the other input does: one form after the merge.
    k.count().merge(k.map(lambda v: v)).map(note, meta=True).sink("o")
    compiled = plan(p)
    up = StageChain(compiled, compiled.stage("a"), 0, DictBackend(), {"a.key_by": 1})
    up.values(["x", "y"], metas=[Meta("k1"), Meta("k2")])
    down = StageChain(compiled, compiled.stage("a.key_by"), 0, DictBackend(), {})
    for _, record in up.shuffles["a.key_by"].take(0):
        down.shuffled(decode_shuffle(record)[1])
    down.flush()
    assert sorted(seen, key=repr) == sorted(
        [(1, "k1"), (1, "k2"), ("x", "k1"), ("y", "k2")], key=repr
    )
