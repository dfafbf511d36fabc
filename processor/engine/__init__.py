"""The engine: one stage's operators chained in one task over batches (chain.py, operators/),
event time (time.py, stage_time.py, windows.py, timers.py), state at the epoch's end
(state_flush.py, aggregation.py), what a task takes from the chain at an epoch's end (epoch.py),
shuffles (shuffle_out.py, shuffle_format.py), metadata (meta.py, metachain.py), TTL (expiry.py,
ttl.py) and dead records (dead.py). Pure: no Kafka; state through a two-method backend."""
