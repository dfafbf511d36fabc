"""The chaos run's result (tests/chaos.py): faults by kind, what the verifier found, and
recovery times."""

from __future__ import annotations

import collections
import statistics
from dataclasses import dataclass, field

from tests import broker_faults
from tests.anomalies import Anomalies
from tests.sinkcheck import SinkCheck


@dataclass
class Summary:
    faults: collections.Counter[str] = field(default_factory=collections.Counter)
    records_verified: int = 0
    words: int = 0
    events: int = 0  # clicks run: the clicks and views fed (without the closing ones)
    lost: int = 0
    duplicated: int = 0
    unknown: int = 0
    wrong: int = 0  # pipeline sinks: final values that differ (non-numeric), dead-letter count
    late: int = 0  # clicks and chained runs: records in <job>.late (none can be late)
    dead: int = 0  # chained run: DLQ records, each a poison record of the input (checked)
    sinks: dict[str, SinkCheck] = field(default_factory=dict)
    recovery_s: list[float] = field(default_factory=list)
    # Broker faults, per kind: seconds until leadership left the victim (None: never seen),
    # and until every task committed again.
    moved_s: dict[str, list[float | None]] = field(default_factory=dict)
    recovery_by_kind: dict[str, list[float]] = field(default_factory=dict)
    unconfirmed: int = 0  # coordinator kills whose transactional id was not in that partition
    duration_s: float = 0.0
    # Transaction anomalies read from the brokers' logs (tests/anomalies.py); None: not checked.
    anomalies: Anomalies | None = None

    @property
    def missed(self) -> int:
        """Broker faults that missed: leadership not seen to move, or a transaction
        coordinator kill of a broker whose partition did not hold the transactional id."""
        unmoved = sum(
            s is None
            for kind, moves in self.moved_s.items()
            if kind != broker_faults.ROLLING_RESTART  # no victim to move off: not measured
            for s in moves
        )
        return unmoved + self.unconfirmed

    @property
    def exact(self) -> bool:
        clean = self.anomalies is None or self.anomalies.clean
        return (
            clean and self.lost == self.duplicated == self.unknown == self.wrong == self.late == 0
        )

    def to_json(self) -> dict[str, object]:
        rec = sorted(self.recovery_s)
        return {
            "faults": dict(self.faults),
            "faults_total": sum(self.faults.values()),
            **({"events": self.events} if self.events else {"words": self.words}),
            "records_verified": self.records_verified,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "unknown": self.unknown,
            **(
                {
                    "wrong": self.wrong,
                    "late": self.late,
                    **({"dead": self.dead} if self.dead else {}),
                    "sinks": {t: c.to_json() for t, c in self.sinks.items()},
                }
                if self.sinks
                else {}
            ),
            "recovery_s": {
                "n": len(rec),
                "median": round(statistics.median(rec), 3) if rec else None,
                "max": round(rec[-1], 3) if rec else None,
            },
            **(
                {
                    "broker_faults": {
                        kind: {
                            "leadership_moved": sum(s is not None for s in moves),
                            "moved_s": broker_faults.summarize([s for s in moves if s]),
                            "recovery_s": broker_faults.summarize(
                                self.recovery_by_kind.get(kind, [])
                            ),
                        }
                        for kind, moves in self.moved_s.items()
                    }
                }
                if self.moved_s
                else {}
            ),
            **({"broker_faults_missed": self.missed} if self.moved_s else {}),
            **({"anomalies": self.anomalies.to_json()} if self.anomalies else {}),
            "duration_s": round(self.duration_s, 1),
        }
