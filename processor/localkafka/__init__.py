"""A local Apache Kafka for development and tests: one node (broker.py), one or three nodes
behind `processor kafka` (cluster.py), its download and checks (brokertools.py, checksums/) and
Kafka's own tools (tools.py)."""
