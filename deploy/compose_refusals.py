"""Run by deploy/compose-test.sh inside a worker container (`python -` on stdin), with the
worker's own login (its PROCESSOR_SECRETS_DIR): what the compose broker refuses.

- an anonymous client (no SASL) gets nothing on the containers' listener nor the host's;
- the worker's login works on kafka:9092, is unknown on the controller listener (kafka:9093)
  and on the host listener (kafka:9094), and is denied writing <job>.checkpoints.

Prints one line; exit 0 only when every refusal happened (and the worker's login works).
"""

from __future__ import annotations

import sys
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from processor.config import Settings


def reaches(config: dict[str, Any]) -> tuple[bool, set[str]]:
    """Whether a client with ``config`` gets the broker's metadata, and the errors it saw."""
    seen: set[str] = set()

    def on_error(err: KafkaError) -> None:
        seen.add(err.name())

    admin = AdminClient({**config, "error_cb": on_error, "log_level": 0})
    try:
        admin.list_topics(timeout=8)
        return True, seen
    except KafkaException:
        admin.poll(1)  # serves the error callback: why the broker refused
        return False, seen


def main() -> int:
    settings = Settings()
    login = settings.client_config()
    assert str(login.get("sasl.username")) == "worker", "not the worker's login"
    anonymous = {k: v for k, v in login.items() if not k.startswith(("sasl.", "security."))}
    failures: list[str] = []
    ok, seen = reaches(login)
    if not ok:
        failures.append(f"the worker's login does not reach kafka:9092 ({seen})")
    for server in ("kafka:9092", "kafka:9094"):
        ok, _ = reaches({**anonymous, "bootstrap.servers": server})
        if ok:
            failures.append(f"an anonymous client got metadata from {server}")
    for server in ("kafka:9093", "kafka:9094"):
        ok, seen = reaches({**login, "bootstrap.servers": server})
        if ok or "_AUTHENTICATION" not in seen:
            failures.append(f"the worker's login was not refused by {server} ({seen})")
    delivered: list[KafkaError | None] = []
    producer = Producer({**login, "message.timeout.ms": 20000})
    producer.produce(
        settings.checkpoints_topic, b"forged", on_delivery=lambda e, _: delivered.append(e)
    )
    producer.flush(30)
    error = delivered[0] if delivered else None
    if error is None or error.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
        failures.append(f"the worker wrote {settings.checkpoints_topic}: {error}")
    if failures:
        print("NOT REFUSED: " + "; ".join(failures))
        return 1
    print(
        "refused: anonymous on kafka:9092 and :9094, the worker's login on :9093 and :9094, "
        f"the worker writing {settings.checkpoints_topic} ({error.name()})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
