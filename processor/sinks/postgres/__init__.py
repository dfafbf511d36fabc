"""Exactly-once rows in PostgreSQL: two-phase commit (writer.py), the decision on prepared
transactions at a restore (prepared.py, pure), one Kafka cluster per job name in a database
(claim.py) and connections (conn.py). The pipeline side, `sink_postgres`, is
`processor.api.postgres`."""
