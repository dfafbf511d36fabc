"""Sinks with their own exactly-once protocol beyond Kafka's transactions."""
