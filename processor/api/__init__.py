"""The user's API: `Pipeline` (streams.py) and the typed streams it starts, `Stream[T]`,
`KeyedStream[K, T]`, `WindowedStream[K, T]` (dataflow.py, over base.py), recording a graph
(graph.py) of nodes, a class per kind (node.py); the per-key operators' nodes
(aggregations.py), loops (loops.py) and the windows built of them, window_all and top
(windowing.py); what user functions get (context.py); sinks' targets (targets.py) and
encodings (sinks.py, postgres.py); what each operator does to one value (ops.py); argument
checks (args.py). Nothing here runs: `processor.plan` splits the graph into stages,
`processor.engine` runs them. No module here imports one that imports it
(tests/unit/test_api_imports.py)."""
