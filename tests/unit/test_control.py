"""Control-topic messages: JSON round trips, and None for anything that is not one."""

from __future__ import annotations

import json
import math
from dataclasses import FrozenInstanceError, asdict

import pytest

from processor.models.control import (
    Ack,
    Assignment,
    Completed,
    Decline,
    Endpoint,
    Heartbeat,
    Message,
    TaskStatus,
    Trigger,
    decode,
    encode,
)

MESSAGES: list[Message] = [
    Heartbeat(worker="w1", incarnation="host-123-abc"),
    Heartbeat(
        worker="wörker ✓",
        incarnation="i",
        tasks={
            "split-0": TaskStatus(state="running", checkpoint=12),
            "count-3": TaskStatus(state="starting", checkpoint=0),
            "count-4": TaskStatus(state="failed", checkpoint=-1),
        },
    ),
    Assignment(generation=0, input_partitions=0, tasks={}),
    Assignment(
        generation=17,
        input_partitions=4,
        tasks={"split-0": "w1", "split-1": "w2", "count-0": "w1"},
        coordinator="coord-inc-9",
    ),
    Trigger(checkpoint=1, triggered_at=0.0),
    Trigger(checkpoint=2**53, triggered_at=1_700_000_000.123456),
    Completed(checkpoint=0),
    Completed(checkpoint=2**53),
    Ack(
        task="count-0",
        checkpoint=5,
        worker="w2",
        records_in=0,
        records_out=0,
        lag=0,
        positions={},
    ),
    Ack(
        task="count-1",
        checkpoint=6,
        worker="w1",
        records_in=1000,
        records_out=20,
        lag=3,
        positions={"0": 100, "7": 2**40},
        state_bytes=123_456_789,
        uploaded_bytes=4096,
        alignment_s=0.001,
        sync_s=0.1 + 0.2,  # not exactly representable: must survive the round trip anyway
        upload_s=1e-9,
        commit_s=12.5,
    ),
    Decline(task="split-0", checkpoint=9, reason="snapshot failed: disk full\nsecond line"),
    Decline(task="", checkpoint=0, reason=""),
    Endpoint(worker="worker-1", url="http://10.0.0.7:9401"),
    Endpoint(worker="wörker ✓", url=""),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_round_trip(message: Message) -> None:
    raw = encode(message)
    assert isinstance(raw, bytes)
    decoded = decode(raw)
    assert decoded == message
    assert type(decoded) is type(message)


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_encoding_is_compact_json_with_the_kind(message: Message) -> None:
    raw = encode(message)
    data = json.loads(raw)
    assert data["kind"] == message.kind
    assert data == asdict(message)
    assert b"\n" not in raw  # one message per record, one line
    assert raw == json.dumps(asdict(message), separators=(",", ":")).encode()


def test_every_kind_is_covered() -> None:
    kinds = {"heartbeat", "assignment", "trigger", "completed", "ack", "decline", "endpoint"}
    assert {m.kind for m in MESSAGES} == kinds


def test_an_endpoint_is_strict_and_unknown_kinds_are_none() -> None:
    raw = b'{"kind":"endpoint","worker":"w1","url":"http://w1:9401"}'
    assert decode(raw) == Endpoint("w1", "http://w1:9401")
    assert decode(raw[:-1] + b',"port":9401}') is None  # a field this version does not know
    assert decode(b'{"kind":"endpoint","worker":"w1","url":9401}') is None
    assert decode(b'{"kind":"endpoint2","worker":"w1","url":"u"}') is None


def test_heartbeat_task_statuses_are_dataclasses_again() -> None:
    message = MESSAGES[1]
    decoded = decode(encode(message))
    assert isinstance(decoded, Heartbeat)
    status = decoded.tasks["split-0"]
    assert isinstance(status, TaskStatus)
    assert status.checkpoint == 12


def test_non_finite_floats_round_trip() -> None:
    decoded = decode(encode(Trigger(checkpoint=1, triggered_at=math.inf)))
    assert decoded == Trigger(checkpoint=1, triggered_at=math.inf)
    nan = decode(encode(Trigger(checkpoint=1, triggered_at=math.nan)))
    assert isinstance(nan, Trigger) and math.isnan(nan.triggered_at)


def test_a_completed_checkpoint_is_strict_and_in_range() -> None:
    assert decode(b'{"kind":"completed","checkpoint":7}') == Completed(7)
    assert decode(b'{"kind":"completed","checkpoint":"7"}') is None
    assert decode(b'{"kind":"completed","checkpoint":-2}') is None
    assert decode(b'{"kind":"completed","checkpoint":7,"extra":1}') is None


def test_decode_of_hand_written_json() -> None:
    assert decode(b'{"kind":"trigger","checkpoint":3,"triggered_at":1.5}') == Trigger(3, 1.5)
    assert decode(b' {"triggered_at": 1.5, "checkpoint": 3, "kind": "trigger"} ') == Trigger(3, 1.5)
    assert decode(b'{"kind":"heartbeat","worker":"w","incarnation":"i","tasks":{}}') == Heartbeat(
        "w", "i"
    )
    # Optional fields may be left out.
    assert decode(
        b'{"kind":"assignment","generation":1,"input_partitions":2,"tasks":{"a-0":"w"}}'
    ) == Assignment(1, 2, {"a-0": "w"})
    assert decode(
        b'{"kind":"ack","task":"a-0","checkpoint":1,"worker":"w","records_in":1,'
        b'"records_out":2,"lag":3,"positions":{"0":4}}'
    ) == Ack("a-0", 1, "w", 1, 2, 3, {"0": 4})
    assert decode('{"kind":"decline","task":"t","checkpoint":1,"reason":"ü"}'.encode()) == Decline(
        "t", 1, "ü"
    )


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b" ",
        b"not json",
        b"{",
        b'{"kind":"trigger"',
        b"\xff\xfe\xfa",  # not UTF-8 (nor UTF-16)
        b"\x80abc",
        b"null",
        b"1",
        b"1.5",
        b"true",
        b'"trigger"',
        b"[]",
        b'["trigger", 1, 2.0]',
        b"{}",
        b'{"kind":null}',
        b'{"kind":1}',
        b'{"kind":["ack"]}',
        b'{"kind":{"a":1}}',
        b'{"kind":"Trigger","checkpoint":1,"triggered_at":0.0}',  # kinds are case-sensitive
        b'{"kind":"savepoint","checkpoint":1}',  # a newer version's message
        b'{"kind":"","checkpoint":1}',
        b'{"checkpoint":1,"triggered_at":0.0}',  # no kind at all
    ],
)
def test_garbage_and_unknown_kinds_decode_to_none(raw: bytes) -> None:
    assert decode(raw) is None


@pytest.mark.parametrize(
    "raw",
    [
        # Missing required fields.
        b'{"kind":"trigger","checkpoint":1}',
        b'{"kind":"trigger"}',
        b'{"kind":"assignment","generation":1,"tasks":{}}',
        b'{"kind":"ack","task":"a-0","checkpoint":1}',
        b'{"kind":"decline","task":"t","checkpoint":1}',
        b'{"kind":"heartbeat","incarnation":"i","tasks":{}}',
        # Fields this version does not know.
        b'{"kind":"trigger","checkpoint":1,"triggered_at":0.0,"epoch":3}',
        b'{"kind":"decline","task":"t","checkpoint":1,"reason":"r","extra":null}',
        # Fields of another kind.
        b'{"kind":"trigger","task":"t","checkpoint":1,"reason":"r"}',
        # Malformed heartbeat task statuses.
        b'{"kind":"heartbeat","worker":"w","incarnation":"i","tasks":null}',
        b'{"kind":"heartbeat","worker":"w","incarnation":"i","tasks":[]}',
        b'{"kind":"heartbeat","worker":"w","incarnation":"i","tasks":"x"}',
        b'{"kind":"heartbeat","worker":"w","incarnation":"i","tasks":{"a-0":1}}',
        b'{"kind":"heartbeat","worker":"w","incarnation":"i","tasks":{"a-0":null}}',
        b'{"kind":"heartbeat","worker":"w","incarnation":"i","tasks":{"a-0":{"state":"x"}}}',
        b'{"kind":"heartbeat","worker":"w","incarnation":"i",'
        b'"tasks":{"a-0":{"state":"x","checkpoint":1,"more":2}}}',
        # Fields of the wrong type: each of these raised in the coordinator's or a worker's
        # main loop before (issue 25), where one record crash-looped it.
        b'{"kind":"heartbeat","worker":"w","incarnation":"i",'
        b'"tasks":{"a-0":{"state":"running","checkpoint":"x"}}}',
        b'{"kind":"heartbeat","worker":1,"incarnation":"i","tasks":{}}',
        b'{"kind":"trigger","checkpoint":"3","triggered_at":0.0}',
        b'{"kind":"trigger","checkpoint":true,"triggered_at":0.0}',
        b'{"kind":"trigger","checkpoint":1,"triggered_at":"now"}',
        b'{"kind":"assignment","generation":1,"input_partitions":"4","tasks":{}}',
        b'{"kind":"assignment","generation":1,"input_partitions":4,"tasks":{"a-0":7}}',
        b'{"kind":"assignment","generation":1,"input_partitions":4,"tasks":{},"stages":[]}',
        b'{"kind":"ack","task":"a-0","checkpoint":1,"worker":"w","records_in":0,'
        b'"records_out":0,"lag":0,"positions":{"0":"5"}}',
        b'{"kind":"ack","task":"a-0","checkpoint":1,"worker":"w","records_in":0,'
        b'"records_out":0,"lag":0,"positions":{},"watermark_ms":"x"}',
        b'{"kind":"decline","task":"t","checkpoint":1,"reason":null}',
    ],
)
def test_wrong_shape_decodes_to_none(raw: bytes) -> None:
    assert decode(raw) is None


def test_a_heartbeat_without_tasks_has_none() -> None:
    assert decode(b'{"kind":"heartbeat","worker":"w","incarnation":"i"}') == Heartbeat("w", "i")


def test_messages_are_frozen() -> None:
    trigger = Trigger(1, 0.0)
    with pytest.raises(FrozenInstanceError):
        trigger.checkpoint = 2  # type: ignore[misc]


def test_default_kinds() -> None:
    assert Heartbeat("w", "i").kind == "heartbeat"
    assert Heartbeat("w", "i").tasks == {}
    assert Assignment(1, 1, {}).kind == "assignment"
    assert Assignment(1, 1, {}).coordinator == ""
    assert Trigger(1, 0.0).kind == "trigger"
    assert Decline("t", 1, "r").kind == "decline"
    a = Ack("t", 1, "w", 0, 0, 0, {})
    assert a.kind == "ack"
    assert (a.state_bytes, a.uploaded_bytes) == (0, 0)
    assert (a.alignment_s, a.sync_s, a.upload_s, a.commit_s) == (0.0, 0.0, 0.0, 0.0)


def test_encode_is_deterministic() -> None:
    for message in MESSAGES:
        assert encode(message) == encode(message)
        decoded = decode(encode(message))
        assert decoded is not None
        assert encode(decoded) == encode(message)
