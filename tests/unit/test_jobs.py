"""Job declarations: word extraction, task ids and the task list of a job."""

# Greek, Cyrillic and Turkish letters are the point of the word tests, not look-alikes.
# ruff: noqa: RUF001

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

from processor.api.streams import Pipeline
from processor.config import Settings
from processor.jobs import load_graph
from processor.jobs.graph import JobGraph, TaskId
from processor.jobs.wordcount import line_words, wordcount_pipeline, words
from processor.plan.stages import plan
from tests.reference import run as reference_run


def reference(lines: Iterable[str]) -> list[str]:
    """The definition: each line on its own, lower-cased, then every \\w+ run."""
    out: list[str] = []
    for line in lines:
        out.extend(re.findall(r"\w+", line.lower()))
    return out


# --- word extraction ----------------------------------------------------------------------------

CASES: list[list[str]] = [
    [],
    [""],
    ["", "", ""],
    ["   ", "\t", " \t "],
    ["hello"],
    ["Hello World"],
    ["HELLO, world! Hello... WORLD?"],
    ["one", "two", "three"],
    ["end-of-line", "start"],
    ["don't stop", "it's", "rock'n'roll"],
    ["snake_case and __dunder__", "_", "___"],
    ["42 is 6*7", "3.14159", "1,000,000", "0x1F"],
    ["tabs\tand  spaces", "multiple   gaps"],
    ["punctuation!!!", "?!.,;:()[]{}<>\"'`~@#$%^&*-+=|\\/"],
    ["a\nb", "embedded\r\nnewlines\rin\vlines\fhere"],
    ["\x00nul\x00byte", "\x1bescape"],
    # Unicode letters, digits and case mapping.
    ["Straße STRASSE straße", "ẞ"],
    ["Ærøskøbing ÅLAND", "Ünïcödé"],
    ["Москва МОСКВА москва", "Ελληνικά ΕΛΛΗΝΙΚΑ"],
    ["ΟΔΟΣ", "ΣΑΣ ΣΟΦΟΣ", "Σ", "ΑΣ", "Β"],  # final sigma depends on the context
    ["ΑΣ", "\u00adΒ"],  # a case-ignorable soft hyphen right after the line break
    ["İstanbul", "DİYARBAKIR", "ı i I İ"],  # dotted capital I lowers to i + combining dot
    ["東京 タワー", "中文字符", "한국어 문장"],
    ["e\u0301cole", "cafe\u0301", "a\u0308"],  # combining marks split \w runs
    ["٣ ٤٥ ١٢٣", "²³ ½", "१२३"],  # other digit systems
    ["emoji 😀 in text", "👍👍", "flag 🇫🇷"],
    ["ﬁne ﬂow", "Ⅻ ⅻ", "ǅ ǆ Ǆ"],  # ligature, roman numerals, title-case digraph
    ["zero\u200bwidth", "no\u00a0break", "ideographic\u3000space"],
    ["MiXeD", "mIxEd", "mixed"],
    ["word " * 50],
]


@pytest.mark.parametrize("lines", CASES)
def test_words_equals_per_line_findall(lines: list[str]) -> None:
    assert words(lines) == reference(lines)


@pytest.mark.parametrize("lines", CASES)
def test_line_words_is_the_batch_form_per_line(lines: list[str]) -> None:
    assert [w for line in lines for w in line_words(line)] == reference(lines)


def test_words_examples() -> None:
    assert words(["Hello, World!", "", "hello again"]) == ["hello", "world", "hello", "again"]
    assert words(["it's"]) == ["it", "s"]
    assert words(["a_b c-d"]) == ["a_b", "c", "d"]
    assert words(["Straße"]) == ["straße"]
    assert words(["ΟΔΟΣ"]) == ["οδος"]
    assert words([]) == []
    assert words(["", ""]) == []


def test_words_never_join_across_lines() -> None:
    assert words(["abc", "def"]) == ["abc", "def"]
    assert words(["abc", "", "def"]) == ["abc", "def"]
    assert words(["ab_", "_cd"]) == ["ab_", "_cd"]


def test_words_do_not_depend_on_batching() -> None:
    lines = [line for case in CASES for line in case]
    whole = words(lines)
    for size in (1, 2, 3, 7):
        batched: list[str] = []
        for i in range(0, len(lines), size):
            batched.extend(words(lines[i : i + size]))
        assert batched == whole


def test_words_does_not_mutate_its_input() -> None:
    lines = ["A b", "C"]
    words(lines)
    assert lines == ["A b", "C"]


ALPHABET = (
    "abcXYZ019_ \t.,;:!?'-\"()/"
    + "äÄöÖüÜßẞéÉ"
    + "ΣσςΑΒΟΔ"
    + "İıIi"
    + "ДжЯ"
    + "東京"
    + "\u0301\u0308\u00ad\u200b\u00a0"
    + "٣²½"
    + "😀"
    + "ǅﬁⅫ"
    + "\r\x00"
)


@pytest.mark.parametrize("seed", range(10))
def test_random_lines_match_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(200):
        lines = [
            "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 30)))
            for _ in range(rng.randint(0, 8))
        ]
        assert words(lines) == reference(lines), lines


def test_every_unicode_letter_pair_across_a_line_break() -> None:
    """Lower-casing the joined batch must equal lower-casing line by line, for every pair of
    a line's last character and the next line's first character among the case-sensitive ones."""
    special = [chr(c) for c in range(0x0370, 0x0400)] + ["İ", "I", "ı", "Σ", "\u00ad", "'", "."]
    rng = random.Random(5)
    for _ in range(3000):
        a = rng.choice(special) + rng.choice(special)
        b = rng.choice(special) + rng.choice(special)
        assert words([a, b]) == reference([a, b]), (a, b)


# --- the built-in word count --------------------------------------------------------------------

WORDCOUNT = JobGraph("wordcount", plan(wordcount_pipeline("wordcount", "words", "word-counts")))


def test_builtin_wordcount_keeps_its_task_ids_and_topics() -> None:
    # Deployments from before pipelines keep their transactional ids, snapshots and topics.
    source, keyed = WORDCOUNT.stages
    assert (source.name, keyed.name) == ("split", "count")
    assert source.source is not None and source.source.topic == "words"
    assert WORDCOUNT.shuffle_topic(keyed) == "wordcount.shuffle"
    assert WORDCOUNT.plan.sink_topics == ["word-counts"]
    assert keyed.combiner is not None and keyed.combiner.kind == "count"


def test_builtin_wordcount_counts_words() -> None:
    lines = [b"Hello world", b"hello again"]
    out = reference_run(wordcount_pipeline("j", "in", "out"), {"in": lines})
    assert out.sinks["out"].final() == {b"hello": b"2", b"world": b"1", b"again": b"1"}


def test_load_graph_default_is_wordcount_on_the_settings_topics() -> None:
    graph = load_graph(Settings(job_name="j", input_topic="in", output_topic="out"))
    assert graph.plan.source_topics == ["in"]
    assert graph.plan.sink_topics == ["out"]
    assert graph.shuffle_topics == ["j.shuffle"]


def test_load_graph_of_a_pipeline_file(tmp_path: Path) -> None:
    path = tmp_path / "p.py"
    path.write_text(
        "from processor import Pipeline\n"
        "pipeline = Pipeline()\n"
        "pipeline.source('a').key_by(len).count().sink('b')\n"
    )
    graph = load_graph(Settings(job_name="j", pipeline=f"{path}:pipeline"))
    assert [s.name for s in graph.stages] == ["a", "a.key_by"]
    assert graph.shuffle_topics == ["j.a.key_by"]


# --- task ids -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "stage", "index"),
    [
        ("split-0", "split", 0),
        ("count-7", "count", 7),
        ("count-1023", "count", 1023),
        ("my-stage-3", "my-stage", 3),  # the index follows the last dash
        ("a-b-c-42", "a-b-c", 42),
        ("s.t_u-9", "s.t_u", 9),
    ],
)
def test_task_id_parse_and_str(text: str, stage: str, index: int) -> None:
    tid = TaskId.parse(text)
    assert tid == TaskId(stage, index)
    assert tid.stage == stage and tid.index == index
    assert str(tid) == text
    assert TaskId.parse(str(tid)) == tid


@pytest.mark.parametrize(
    ("stage", "index"), [("split", 0), ("count", 99), ("x-y", 1), ("stage", 10**12)]
)
def test_task_id_str_round_trips(stage: str, index: int) -> None:
    tid = TaskId(stage, index)
    assert str(tid) == f"{stage}-{index}"
    assert TaskId.parse(str(tid)) == tid


@pytest.mark.parametrize("text", ["split", "split-", "split-x", "split-1.5", "", "-", "count-0x1"])
def test_task_id_parse_rejects_non_numeric_index(text: str) -> None:
    with pytest.raises(ValueError):
        TaskId.parse(text)


def test_task_id_is_a_hashable_value() -> None:
    assert TaskId("count", 1) == TaskId.parse("count-1")
    assert TaskId("count", 1) != TaskId("split", 1)
    assert len({TaskId("count", 1), TaskId.parse("count-1"), TaskId("count", 2)}) == 2
    with pytest.raises(FrozenInstanceError):
        TaskId("count", 1).index = 2  # type: ignore[misc]


# --- task list ----------------------------------------------------------------------------------


def test_task_ids_of_wordcount() -> None:
    ids = WORDCOUNT.task_ids({"split": 3, "count": 2})
    assert ids == ["split-0", "split-1", "split-2", "count-0", "count-1"]


def test_parallelism_sources_by_topic_keyed_by_shuffle_partitions() -> None:
    assert WORDCOUNT.parallelism({"words": 12}, 10) == {"split": 12, "count": 10}
    keyed = WORDCOUNT.stages[1]
    assert WORDCOUNT.channels(keyed, {"split": 12, "count": 10}) == 12


@pytest.mark.parametrize(("inputs", "shuffle"), [(0, 0), (0, 3), (2, 0), (1, 1), (64, 1024)])
def test_task_ids_count_and_parse_back(inputs: int, shuffle: int) -> None:
    ids = WORDCOUNT.task_ids({"split": inputs, "count": shuffle})
    assert len(ids) == len(set(ids)) == inputs + shuffle
    parsed = [TaskId.parse(t) for t in ids]
    assert [p.index for p in parsed if p.stage == "split"] == list(range(inputs))
    assert [p.index for p in parsed if p.stage == "count"] == list(range(shuffle))
    assert {p.stage for p in parsed} <= {"split", "count"}


def test_task_ids_of_a_two_shuffle_pipeline() -> None:
    pipeline = Pipeline()
    words_ = pipeline.source("lines").flat_map(str.split)
    words_.key_by(str).count().sink("counts")
    words_.key_by(str, name="firsts").count().key_by(lambda n: n % 10, name="by-len").count().sink(
        "lens"
    )
    graph = JobGraph("j", plan(pipeline))
    names = [s.name for s in graph.stages]
    assert names == ["lines", "lines.flat_map.key_by", "firsts", "by-len"]
    parallelism = graph.parallelism({"lines": 2}, 3)
    ids = graph.task_ids(parallelism)
    assert ids[:2] == ["lines-0", "lines-1"]
    assert len(ids) == 2 + 3 * 3
    by_len = graph.stage("by-len")
    assert graph.channels(by_len, parallelism) == 3  # the tasks of "firsts"
    assert graph.downstream(graph.stage("lines")) == graph.stages[1:3]
    assert graph.shuffle_topic("by-len") == "j.by-len"
