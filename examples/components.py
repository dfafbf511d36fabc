"""Connected components of a growing graph, with a loop (`KeyedStream.iterate`).

Input records on ``edges``: ``{"u": 3, "v": 7}``, an undirected edge between two vertices
(integers). Output on ``components``: key the vertex, value ``{"vertex": v, "component": c}``:
the first time a vertex is seen, its own id; then every time its component's label gets
smaller. A vertex's last record holds the smallest vertex id of its component.

Each vertex keeps its label and its neighbours. A new edge tells the vertex's neighbour its
label; a smaller label from a neighbour is taken and passed on to every neighbour. The
labels travel round the loop: from the ``process`` back into it through the feedback
``key_by``, one round per checkpoint, exactly once, also across failures.
"""

from typing import Any

from processor import Pipeline


def step(msg: dict[str, Any], state: Any) -> list[dict[str, Any]]:
    """One vertex (``state.key``) takes a new neighbour (``edge``) or a label from one."""
    s = state.get()
    out: list[dict[str, Any]] = []
    if s is None:  # first sight: its own component
        s = {"label": state.key, "nbrs": []}
        out.append({"vertex": state.key, "component": state.key})
    if "edge" in msg:
        s["nbrs"].append(msg["edge"])
        out.append({"to": msg["edge"], "label": s["label"]})
    elif msg["label"] < s["label"]:
        s["label"] = msg["label"]
        out += [{"to": n, "label": s["label"]} for n in s["nbrs"]]
        out.append({"vertex": state.key, "component": s["label"]})
    state.set(s)
    return out


def body(vertices: Any) -> tuple[Any, Any]:
    """The loop: labels for neighbours go round, component changes go out."""
    stepped = vertices.process(step, name="vertex")
    feedback = (
        stepped.filter(lambda m: "to" in m)
        .key_by(lambda m: m["to"], name="to-neighbour")
        .map(lambda m: {"label": m["label"]})
    )
    output = stepped.filter(lambda m: "vertex" in m)
    return feedback, output


def components_of(p: Pipeline, edges: str) -> Any:
    """The stream of component changes of the edges on topic ``edges``, in pipeline ``p``."""
    return (
        p.source(edges, value="json")
        .flat_map(lambda e: [(e["u"], e["v"]), (e["v"], e["u"])])
        .key_by(lambda uv: uv[0], name="by-vertex")
        .map(lambda uv: {"edge": uv[1]})
        .iterate(body, name="labels")
    )


def build(edges: str = "edges", components: str = "components") -> Pipeline:
    """The pipeline over the given topics (the tests run it on topics of their own)."""
    p = Pipeline(name="components")
    components_of(p, edges).sink(components)
    return p


pipeline = build()
