"""The pipeline API: the graph it records, its stages, loading from a file, the reference run."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from processor import Pipeline, PipelineError
from processor.plan.load import load_pipeline
from processor.plan.stages import plan
from tests.reference import run

CONTRACT = """
import re
from processor import Pipeline

pipeline = Pipeline()

words = pipeline.source("lines", value="text").flat_map(
    lambda line: re.findall(r"\\w+", line.lower()))
words.key_by(lambda w: w).count().sink("word-counts")

def first_sight(word, state):
    if state.get() is None:
        state.set(True)
        return [word]
    return []

(words.key_by(lambda w: w).process(first_sight)
      .key_by(lambda w: w[0]).count().sink("distinct-words-per-letter"))

orders = pipeline.source("orders", value="json")
(orders.filter(lambda o: o.get("status") == "paid")
       .key_by(lambda o: o["user"]).map(lambda o: o["amount"]).sum().sink("revenue"))
"""


@pytest.fixture
def contract(tmp_path: Path) -> Path:
    path = tmp_path / "contract.py"
    path.write_text(CONTRACT)
    return path


def test_the_contract_example_compiles_to_stages_split_at_each_key_by(contract: Path) -> None:
    pipeline, compiled = load_pipeline(f"{contract}:pipeline")
    assert [s.name for s in compiled.stages] == [
        "lines",
        "lines.flat_map.key_by",
        "lines.flat_map.key_by-2",
        "lines.flat_map.key_by-2.process.key_by",
        "orders",
        "orders.filter.key_by",
    ]
    lines = compiled.stage("lines")
    assert lines.source is not None and lines.source.topic == "lines"
    # The operators between two shuffles are chained in one task.
    assert [n.kind for n in lines.nodes] == ["flat_map", "key_by", "key_by"]
    assert [n.name for n in lines.shuffles] == ["lines.flat_map.key_by", "lines.flat_map.key_by-2"]
    counts = compiled.stage("lines.flat_map.key_by")
    assert counts.upstream is lines
    assert [n.kind for n in counts.nodes] == ["count", "sink"]
    assert counts.combiner is not None and counts.combiner.kind == "count"
    assert counts.shuffle_topic("wc") == "wc.lines.flat_map.key_by"
    first = compiled.stage("lines.flat_map.key_by-2")
    assert first.combiner is None  # process keeps per-record semantics: no pre-aggregation
    assert [n.kind for n in first.stateful] == ["process"]
    revenue = compiled.stage("orders.filter.key_by")
    assert [n.kind for n in revenue.nodes] == ["map", "sum", "sink"]
    assert revenue.combiner is None  # a map stands between the shuffle and the sum
    assert compiled.sink_topics == ["distinct-words-per-letter", "revenue", "word-counts"]
    assert compiled.source_topics == ["lines", "orders"]
    assert len(pipeline.nodes) == 16


def test_names_are_stable_when_a_branch_is_added() -> None:
    def build(extra: bool) -> list[str]:
        p = Pipeline()
        s = p.source("in")
        if extra:
            s.map(str).sink("other")
        s.filter(bool).key_by(len).count().sink("out")
        return [n.name for n in p.nodes if n.kind != "sink" and not n.name.startswith("in.map")]

    assert build(False) == build(True)


def test_given_names_are_used_and_must_be_unique_and_topic_safe() -> None:
    p = Pipeline()
    s = p.source("in").key_by(len, name="by-length")
    s.count(name="lengths").sink("out")
    assert [n.name for n in p.nodes][:3] == ["in", "by-length", "lengths"]
    with pytest.raises(PipelineError, match="'lengths' is used twice"):
        s.count(name="lengths")
    with pytest.raises(PipelineError, match="operator name 'a b'"):
        s.sum(name="a b")


def test_a_topic_read_by_two_sources_is_refused_with_the_branching_advice() -> None:
    # Both stages would commit their positions as TopicPartition("in", p) in the job's
    # group: a restart would resume each at the other's position.
    p = Pipeline()
    p.source("in", name="a").map(str).sink("out")
    with pytest.raises(PipelineError) as caught:
        p.source("in", name="b")
    assert str(caught.value) == (
        "source('in') is read twice (source 'a' reads it already): read a topic once and "
        "branch the stream, s = p.source('in'); s.map(...); s.filter(...)"
    )
    with pytest.raises(PipelineError, match="read twice"):
        p.source("in")  # unnamed too: not "operator name 'in' is used twice"
    p.source("other").sink("out2")  # another topic is fine
    assert [s.name for s in plan(p).stages] == ["a", "other"]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda p: p.source("in").map(str), "has no sink"),
        (lambda p: p.source("in", value="xml"), "value must be one of"),
        (lambda p: p.source(""), "non-empty string"),
        (lambda p: p.source("in").map(42), "map: expected a function, got int"),
        (lambda p: p.source("in").sink(""), "non-empty string"),
    ],
)
def test_a_pipeline_that_cannot_run_is_one_line_naming_the_problem(
    build: Any, message: str
) -> None:
    p = Pipeline()
    with pytest.raises(PipelineError, match=re.escape(message)) as caught:
        build(p)
        plan(p)
    assert "\n" not in str(caught.value)


def test_no_source_and_not_a_pipeline() -> None:
    with pytest.raises(PipelineError, match="no source"):
        plan(Pipeline())
    with pytest.raises(PipelineError, match=r"expected a processor\.Pipeline, got dict"):
        plan({})  # type: ignore[arg-type]


def test_a_long_shuffle_topic_name_is_refused_with_advice() -> None:
    p = Pipeline()
    p.source("t" * 150).key_by(len).count().sink("out")
    compiled = plan(p)
    compiled.check_topic_names("job")
    with pytest.raises(PipelineError, match="name the key_by"):
        compiled.check_topic_names("j" * 100)


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (
            lambda p: p.source("in").sink("job.control"),
            r"sink\('job.control'\) is job job's own control",
        ),
        (lambda p: p.source("in").sink("job.checkpoints"), "own checkpoints topic"),
        (lambda p: p.source("in").sink("job.dlq"), "own dlq topic"),
        (lambda p: p.source("job.late").sink("out"), r"source\('job.late'\) is job job's own late"),
        (
            lambda p: p.source("in").key_by(len, name="count").count().sink("job.count"),
            "own shuffle topic of stage 'count'",
        ),
        (
            lambda p: p.source("in").key_by(len, name="control").count().sink("out"),
            "stage 'control' would shuffle through job.control",
        ),
    ],
)
def test_a_topic_of_the_job_itself_is_refused(
    build: Callable[[Pipeline], None], error: str
) -> None:
    """Issue 25: a sink into <job>.control fed the coordinator records it could not read."""
    p = Pipeline()
    build(p)
    with pytest.raises(PipelineError, match=error):
        plan(p).check_topic_names("job")


def test_another_jobs_internal_topic_is_a_topic_like_any_other() -> None:
    p = Pipeline()
    p.source("job.late").key_by(len, name="count").count().sink("job.control")
    plan(p).check_topic_names("other")


HEADER = "from processor import Pipeline\n"


@pytest.mark.parametrize(
    ("body", "spec_suffix", "message"),
    [
        (None, ":pipeline", "does not exist"),
        ("import no_such_module_here\n", ":pipeline", "does not import: ModuleNotFoundError"),
        ("x = 1 / 0\n", "", "ZeroDivisionError: division by zero (bad.py, line 1)"),
        ("def f(:\n", ":pipeline", "SyntaxError: "),
        (
            "from processor import Pipeline\np = Pipeline()\n",
            ":pipeline",
            "no attribute 'pipeline'",
        ),
        ("pipeline = {}\n", ":pipeline", "is a dict, not a processor.Pipeline"),
        ("x = 1\n", "", "defines no processor.Pipeline at its top level"),
        (f"{HEADER}a = Pipeline()\nb = Pipeline()\n", "", "defines 2 pipelines (a, b): name one"),
        (
            f"{HEADER}pipeline = Pipeline()\npipeline.source('a')\n",
            ":pipeline",
            "has no sink",
        ),
        (
            f"{HEADER}pipeline = Pipeline()\npipeline.source('a', value='x')\n",
            "",
            "bad.py: source('a', value='x')",
        ),
    ],
)
def test_loading_problems_are_one_line(
    tmp_path: Path, body: str | None, spec_suffix: str, message: str
) -> None:
    path = tmp_path / "bad.py"
    if body is not None:
        path.write_text(body)
    with pytest.raises(PipelineError) as caught:
        load_pipeline(f"{path}{spec_suffix}")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_file_without_attribute_gives_its_one_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "mine.py"
    path.write_text(f"{HEADER}p = Pipeline()\np.source('a').sink('b')\n")
    pipeline, _ = load_pipeline(str(path))
    assert [n.topic for n in pipeline.sinks] == ["b"]


def test_reference_run_of_the_contract_example(contract: Path) -> None:
    pipeline, _ = load_pipeline(str(contract))  # the attribute defaults to `pipeline`
    lines = [b"The cat and the hat", b"A cat, a bat!", None, b"\xff bad utf8"]
    orders = [
        json.dumps({"user": "ann", "amount": 5, "status": "paid"}).encode(),
        json.dumps({"user": "bob", "amount": 7, "status": "open"}).encode(),
        json.dumps({"user": "ann", "amount": 3, "status": "paid"}).encode(),
        b"{not json",
        json.dumps({"status": "paid"}).encode(),  # no "user": the key_by raises
    ]
    result = run(pipeline, {"lines": lines, "orders": orders})

    words = Counter(re.findall(r"\w+", "the cat and the hat a cat, a bat!"))
    counts = result.sinks["word-counts"]
    assert counts.changelog
    assert counts.final() == {w.encode(): str(n).encode() for w, n in words.items()}
    per_letter = Counter(w[0] for w in words)
    assert result.sinks["distinct-words-per-letter"].final() == {
        k.encode(): str(n).encode() for k, n in per_letter.items()
    }
    assert result.sinks["revenue"].final() == {b"ann": b"8"}
    assert [operator for operator, _ in result.dead] == [
        "lines",
        "orders",
        "orders.filter.key_by",
    ]
    assert result.dead[0][1].startswith("not UTF-8")
    assert result.dead[2][1].startswith("KeyError")


def test_reference_run_of_aggregations_and_plain_sinks() -> None:
    p = Pipeline()
    nums = p.source("n", value="json")
    nums.key_by(lambda v: v % 2).reduce(max).sink("max")
    nums.key_by(lambda v: v % 2).aggregate([], lambda acc, v: [*acc, v]).sink("all")
    merged = nums.key_by(lambda v: v % 2)
    merged.aggregate(0, lambda acc, v: acc + 1, merge=lambda a, b: a + b).sink("n")
    nums.map(lambda v: {"v": v}).sink("plain")
    compiled = plan(p)
    # aggregate without merge: values are shipped one by one.
    assert [s.combiner.kind if s.combiner else None for s in compiled.stages[1:]] == [
        "reduce",
        None,
        "aggregate",
    ]
    merged.sum()  # a second consumer of a shuffle: no pre-aggregation for either
    assert plan(p).stages[3].combiner is None
    result = run(p, {"n": [b"3", b"8", b"5", b"2"]})
    assert result.sinks["max"].final() == {b"1": b"5", b"0": b"8"}
    assert result.sinks["all"].final() == {b"1": b"[3,5]", b"0": b"[8,2]"}
    assert result.sinks["n"].final() == {b"1": b"2", b"0": b"2"}
    plain = result.sinks["plain"]
    assert not plain.changelog
    assert plain.multiset() == Counter({(None, b'{"v":%d}' % v): 1 for v in (3, 8, 5, 2)})


def test_a_value_that_is_not_json_goes_to_the_dead_letters() -> None:
    p = Pipeline()
    p.source("b", value="bytes").sink("out")
    p.source("t").map(lambda s: {s}).sink("sets")
    result = run(p, {"b": [b"raw"], "t": [b"x"]})
    assert result.sinks["out"].records == []
    assert result.sinks["sets"].records == []
    assert [(op, err.split(":")[0]) for op, err in result.dead] == [
        ("b.sink", "bytes are not JSON-encodable"),
        ("t.map.sink", "value {'x'} is not JSON-encodable"),
    ]
