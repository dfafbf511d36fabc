"""examples/carts.py run by the engine (a coordinator and two workers as processes), one
worker SIGKILLed mid-stream and replaced: Kafka keys and headers in user code, event-time
timers, a sink with key and header functions and a count emitted per record. Every abandoned
cart once, every checkout once, exactly as computed directly from the input; the count per
event type is 1, 2, 3... with no gap and no repeat."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tests.carts_data import canonical, carts
from tests.integration.pipeline_run import PipelineRun, read_committed

MODULE = Path(__file__).with_name("carts_never_idle.py")
TOPICS = {
    "cart_events": "cart-events",
    "cart_outcomes": "cart-outcomes",
    "events_per_type": "events-per-type",
}


def test_carts_with_a_worker_killed_mid_stream_are_exactly_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    data = carts(sessions=3000, partitions=2, seed=5)
    run = PipelineRun(
        kafka_bootstrap, tmp_path, MODULE, TOPICS, shuffle_partitions="2", expected_workers="2"
    )
    try:
        run.start(workers=2)
        run.feed_records("cart_events", data.records, seconds=4)
        run.kill_mid_stream(1)
        run.drain(timeout=180)
        got: Counter[tuple[str, str]] = Counter()
        for part in read_committed(kafka_bootstrap, run.topics["cart_outcomes"]).values():
            for key, value, headers in part:
                result = json.loads(value or b"")
                assert key == result["user"].encode()
                kind = b"abandoned" if "abandoned" in result else b"checkout"
                assert headers.get("outcome") == kind, headers
                got[result["user"], canonical(result)] += 1
        missing, extra = data.outcomes - got, got - data.outcomes
        assert not missing and not extra, (list(missing)[:3], list(extra)[:3])
        counts: dict[str, list[int]] = {}  # event type -> its updates
        for part in read_committed(kafka_bootstrap, run.topics["events_per_type"]).values():
            for raw_key, value, _ in part:
                counts.setdefault((raw_key or b"").decode(), []).append(int(value or b"0"))
        assert {t: len(c) for t, c in counts.items()} == dict(data.per_type)
        for event_type, updates in counts.items():
            assert updates == list(range(1, data.per_type[event_type] + 1)), (
                event_type,
                updates[:10],
            )
        dead = read_committed(kafka_bootstrap, run.settings.dlq_topic)
        assert not any(dead.values()), "no event of this input is dead"
    finally:
        run.stop()
