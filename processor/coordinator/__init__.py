"""The coordinator service (service.py: its I/O) around a pure state machine of messages and
ticks (machine.py): one per job (lease.py), tasks to workers (`processor.jobs.assignment`), what
heartbeats say (reports.py), past checkpoints (journal.py), the job's topics (topics.py), a first
start from a savepoint (savepoint.py) and the status pages (status/)."""
