"""The compose stack's Kafka logins, made once: the `credentials` step of docker-compose.yml.

Runs as root in the processor image before the broker starts, with one volume per reader
mounted under /secrets, and writes a random password for each of the broker's SASL/PLAIN users
(nothing is committed, nothing is in a compose file or an environment variable a
`docker inspect` shows):

    admin        the super user: the broker itself (inter-broker, controller), the health
                 check, `topics` and `acls` (which grants the others their rules)
    coordinator  the coordinator's principal: `processor acls` --coordinator-principal
    worker       the workers' principal (they run user code): --worker-principal
    client       the user's own producer and reader: the demo producer, and from the host

Each volume is readable by its service's user only (the broker's uid 1000, the processor
image's 10001; files 0400, as PROCESSOR_SECRETS_DIR requires), so a worker never sees the
coordinator's password. On the broker, the controller listener knows only `admin` and the
host listener only `admin` and `client`. A second `up` keeps the logins; `down -v` drops them.

    /secrets/broker/kafka.env          KAFKA_LISTENER_NAME_<L>_PLAIN_SASL_JAAS_CONFIG, sourced
    /secrets/broker/admin.properties   --command-config of Kafka's tools
    /secrets/<admin|coordinator|worker|client>/PROCESSOR_KAFKA_CONFIG
    /secrets/client/client.properties  the client's login for Kafka's own tools
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from pathlib import Path

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else "/secrets")
KAFKA_UID = 1000  # the apache/kafka image's appuser
PROCESSOR_UID = 10001  # the processor image's user
USERS = ("admin", "coordinator", "worker", "client")
# Who may log in on which listener (docker-compose.yml's KAFKA_LISTENERS).
LISTENERS = {
    "INTERNAL": USERS,
    "CONTROLLER": ("admin",),
    "HOST": ("admin", "client"),
}
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule required"
CONFIG = "PROCESSOR_KAFKA_CONFIG"


def files(passwords: dict[str, str]) -> dict[Path, tuple[str, int]]:
    """Every file to write: path -> (text, owner uid)."""

    def login(user: str) -> str:
        return f'{PLAIN} username="{user}" password="{passwords[user]}";'

    def processor_config(user: str) -> str:
        return json.dumps(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": user,
                "sasl.password": passwords[user],
            }
        )

    def properties(user: str) -> str:
        return (
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
            f"sasl.jaas.config={login(user)}\n"
        )

    env = "".join(
        f"export KAFKA_LISTENER_NAME_{name}_PLAIN_SASL_JAAS_CONFIG='{PLAIN} "
        f'username="admin" password="{passwords["admin"]}" '
        + " ".join(f'user_{u}="{passwords[u]}"' for u in users)
        + ";'\n"
        for name, users in LISTENERS.items()
    )
    result = {
        ROOT / "broker" / "kafka.env": (env, KAFKA_UID),
        ROOT / "broker" / "admin.properties": (properties("admin"), KAFKA_UID),
        ROOT / "client" / "client.properties": (properties("client"), PROCESSOR_UID),
    }
    for user in USERS:
        result[ROOT / user / CONFIG] = (processor_config(user), PROCESSOR_UID)
    return result


def main() -> int:
    planned = files(dict.fromkeys(USERS, ""))
    if all(path.is_file() for path in planned):
        print("credentials: the logins of an earlier start are kept")
        return 0
    # Letters, digits, - and _: nothing to quote in JAAS, JSON or a shell's single quotes.
    passwords = {user: secrets.token_urlsafe(24) for user in USERS}
    owners: dict[Path, int] = {}
    for path, (text, uid) in files(passwords).items():
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chown(path, uid, uid)
        owners[path.parent] = uid
    for directory, uid in owners.items():
        os.chown(directory, uid, uid)
        os.chmod(directory, 0o700)
    print(f"credentials: new logins for {', '.join(USERS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
