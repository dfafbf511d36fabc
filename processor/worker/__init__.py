"""The worker service (service.py) and its two task kinds: source tasks (source.py) and keyed
tasks (keyed.py, owning an epoch writer and its checkpoints, with their start, restore,
watermarks and loops' feedback), what every task has (task.py), an epoch into the transaction
(epoch_out.py) and dead records (deadletter.py)."""
