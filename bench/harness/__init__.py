"""The harness the scripts in bench/ are built of: brokers, producers and readers, the
phases of bench/run.py and what they report (bench/README.md, "Layout")."""
