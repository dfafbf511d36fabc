"""``--pipeline path/to/file.py:attribute``: every process loads the pipeline from the file.

Nothing is pickled: the coordinator and each worker import the same file, and operator names
derived from the pipeline's shape come out the same in each. Any problem is a PipelineError
whose message is one line naming it, before anything runs.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
import traceback
from pathlib import Path

from processor.api.streams import Pipeline, PipelineError
from processor.plan.stages import Plan, plan


def load_pipeline(spec: str) -> tuple[Pipeline, Plan]:
    """The pipeline named by ``spec``: ``file.py:attr``, or ``file.py`` for its ``pipeline``
    attribute or else the one `Pipeline` the file defines at its top level.

    The file is imported once per process (again only if it changed): the job's name and
    its graph come from the same import."""
    path, attr = _split(spec)
    if not path.is_file():
        raise PipelineError(f"pipeline file {path} does not exist")
    stat = path.stat()
    return _load(path, attr, stat.st_mtime_ns, stat.st_size)


def pipeline_job_name(spec: str) -> str:
    """The job name of the pipeline ``spec`` names: its ``Pipeline(name=...)``, else its
    file's stem made a job name (``my.clicks.py`` -> ``my-clicks``)."""
    pipeline, _ = load_pipeline(spec)
    if pipeline.name:
        return pipeline.name
    stem = re.sub(r"[^A-Za-z0-9_-]", "-", _split(spec)[0].stem).lstrip("-_")[:100]
    return stem or "pipeline"


def _split(spec: str) -> tuple[Path, str | None]:
    path_text, colon, attr = spec.rpartition(":")
    if not colon or not path_text.endswith(".py"):
        return Path(spec), None
    return Path(path_text), attr


@functools.lru_cache(maxsize=8)
def _load(path: Path, attr: str | None, _mtime_ns: int, _size: int) -> tuple[Pipeline, Plan]:
    module_name = f"processor_pipeline_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise PipelineError(f"pipeline file {path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(loader_spec)
    # Functions defined in the file must be importable by name (e.g. for their repr).
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except PipelineError as exc:
        raise PipelineError(f"pipeline file {path}: {exc}") from None
    except BaseException as exc:  # noqa: BLE001 - whatever the user's file raised
        sys.modules.pop(module_name, None)
        raise PipelineError(f"pipeline file {path} does not import: {_where(exc, path)}") from None
    if attr is None:
        attr = _the_pipeline(module, path)
    if not hasattr(module, attr):
        raise PipelineError(f"pipeline file {path} has no attribute {attr!r}")
    pipeline = getattr(module, attr)
    if not isinstance(pipeline, Pipeline):
        raise PipelineError(
            f"{path}:{attr} is a {type(pipeline).__name__}, not a processor.Pipeline"
        )
    return pipeline, plan(pipeline)


def _the_pipeline(module: object, path: Path) -> str:
    """The attribute of a file given without one: ``pipeline``, or else the name of the one
    `Pipeline` at its top level."""
    if hasattr(module, "pipeline"):
        return "pipeline"
    found = sorted(k for k, v in vars(module).items() if isinstance(v, Pipeline))
    if len(found) == 1:
        return found[0]
    if not found:
        raise PipelineError(f"pipeline file {path} defines no processor.Pipeline at its top level")
    raise PipelineError(
        f"pipeline file {path} defines {len(found)} pipelines ({', '.join(found)}): name one, "
        f"{path}:{found[0]}"
    )


def _where(exc: BaseException, path: Path) -> str:
    """``ExcType: message (file.py, line N)``: the user's own line, if the traceback has one."""
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} ({path.name}, line {exc.lineno})"
    line = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).resolve() == path.resolve():
            line = f" ({path.name}, line {frame.lineno})"
    text = " ".join(str(exc).split()) or "(no message)"
    return f"{type(exc).__name__}: {text}{line}"
