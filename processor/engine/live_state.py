"""What a stage's chain holds in memory for a key during an epoch, before its flush writes it
to the state: the newest value, which a ``fresh`` state request (docs/query-state.md) shows.

Read from a request thread while the task thread runs the chain: only single dict lookups
(atomic under the GIL) and one encoding of the value found; a value that changes while it is
encoded (an aggregate's mutable accumulator) is not shown rather than shown torn.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from processor.api.ops import UNSET
from processor.engine.process_op import DELETED
from processor.engine.windows import DELETED as STATE_DELETED
from processor.serde.codec import sink_value

if TYPE_CHECKING:
    from processor.engine.chain import StageChain

NOT_HELD = (False, None)


def epoch_value(chain: StageChain, store_key: bytes) -> tuple[bool, bytes | None]:
    """``(True, bytes)`` for a key (``<operator>\\0<key text>``) the epoch changed in
    memory, ``(True, None)`` for one it deleted, ``(False, None)`` for one it did not touch
    (the store has its newest value).

    Example: ``epoch_value(chain, b"counts\\0apple") == (True, b"12")`` mid-epoch.
    """
    operator, sep, raw_text = store_key.partition(b"\0")
    if not sep:
        return NOT_HELD
    name, text = operator.decode(), raw_text.decode()
    held: Any = UNSET
    # The operators own these maps (`processor.engine.operators.keyed`): an aggregation's
    # dirty one, a process's cache; then the windows'.
    aggregates, processes = list(chain._aggregates), list(chain._processes.values())
    maps: list[tuple[str, dict[str, Any]]] = [(op.node.name, op.dirty) for op in aggregates]
    maps += [(op.node.name, op.cache) for op in processes]
    for node_name, values in maps:
        if node_name == name:
            held = values.get(text, UNSET)
            if held is not UNSET:
                break
    if held is UNSET:
        for node, op in list(chain._windows.items()):
            if node.name == name:
                held = op._cache.get(text, UNSET)
    if held is UNSET:
        return NOT_HELD
    if held is DELETED or held is STATE_DELETED:
        return True, None
    try:
        return True, sink_value(held)
    except Exception:  # noqa: BLE001 - changed while encoded, or not storable: not shown
        return NOT_HELD
