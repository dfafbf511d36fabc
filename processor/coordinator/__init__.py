"""The coordinator service (service.py): one per job (lease.py), tasks to workers
(`processor.jobs.assignment`), what heartbeats say (reports.py), the job's topics (topics.py), a
first start from a savepoint (savepoint.py) and the status pages (status/)."""
