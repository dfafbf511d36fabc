"""The user's API: `Pipeline`, `Stream` and `KeyedStream` (streams.py) record a graph of nodes
(node.py); what each operator means for one value (ops.py), sinks' options (sinks.py, postgres.py),
the checks of arguments (args.py), the per-key aggregations (aggregations.py) and loops (loops.py).
Nothing here runs: `processor.plan` splits the graph into stages, `processor.engine` runs them."""
