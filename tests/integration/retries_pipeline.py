"""A "retry until done" loop for the tests: each job goes round once per try it has left,
and the count of its tries is state, so a try processed twice or lost changes the output."""

from typing import Any

from processor import Pipeline


def attempt(job: dict[str, Any], state: Any) -> list[dict[str, Any]]:
    tries = (state.get() or 0) + 1
    state.set(tries)
    return [{"id": job["id"], "left": job["left"] - 1, "tries": tries}]


def body(jobs: Any) -> tuple[Any, Any]:
    tried = jobs.process(attempt, name="attempt")
    again = tried.filter(lambda j: j["left"] > 0).key_by(lambda j: j["id"], name="again")
    return again, tried.filter(lambda j: j["left"] == 0)


def build(jobs: str = "jobs", done: str = "done") -> Pipeline:
    p = Pipeline()
    keyed = p.source(jobs, value="json").key_by(lambda j: j["id"], name="by-job")
    keyed.iterate(body, name="retries").sink(done)
    return p
