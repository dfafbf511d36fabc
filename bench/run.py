"""This project against Kafka Streams, Quix Streams and Flink: the same word count, same broker.

One local Kafka 4.4.0 broker (127.0.0.1:29092, controller 29093, data in a temp dir) serves
every system in turn. Each system gets its own copy of the same seeded Zipf corpus in
``<system>.input`` (4 partitions, produced before it starts: a full backlog), writes
``<system>.output``, commits every 1 s exactly-once, and runs with a parallelism of 2 (workers,
stream threads, processes). Its output is verified (read_committed, to the end: the last value
per word is the exact count, nothing unknown; for this project also strictly increasing)
before its figures count.

Phases: throughput and resources (every system), the steady state on a backlog (every row:
bench/harness/steady.py), the balanced live capacity (every row with an output: bench/capacity.py;
quick mode only this project's, two short steps), latency at a fixed input rate (every system
that sustains it) and at half the balanced capacity (full mode), state-size scaling of this
project's checkpoints (bench/scaling.py), recovery after SIGKILL (this project, full mode
only: bench/recovery.py). The headline's words/s is the balanced live capacity where it ran.

    python bench/run.py --quick          # 300k words, 100k/1M keys, no recovery: ~9 minutes
    python bench/run.py                  # 4M words, 1M/10M keys, recovery: ~10-15 minutes
    python bench/run.py --systems processor --words 1000000 --no-latency
    python bench/run.py --quick --results-dir /tmp/bench     # CI: leaves bench/results alone
    python bench/run.py --render bench/results/<timestamp>.json   # latest.md/.png from a result

Writes <results-dir>/<timestamp>.json and .png (the figure, bench/plot.py), latest.md and
latest.png (default results dir: bench/results); progress goes to stderr, and the last line on
stdout is one JSON object with the headline figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import capacity, loadgen  # noqa: E402
from bench.harness.common import say  # noqa: E402
from bench.harness.latency_phase import latency_phase  # noqa: E402
from bench.harness.measure import (  # noqa: E402
    exact_counts,
)
from bench.harness.modes import (  # noqa: E402
    FULL,
    FULL_STEADY,
    INTERVAL_MS,
    PEERS,
    PORT,
    QUICK,
    QUICK_STEADY,
    RESULTS,
    Mode,
    steady_row_keys,
    steady_rows,
)
from bench.harness.phases import (  # noqa: E402
    SETTING_ONLY,
    BrokerDied,
    capacity_phase,
    recovery,
    scaling,
    steady_state,
    summarize_steady,
    throughput,
)
from bench.harness.provenance import (  # noqa: E402
    same_measured_code,
    source_version,
    terminate_as_interrupt,
)
from bench.harness.report import headline, markdown, plot_python, write_plot  # noqa: E402
from processor.commands import corpus  # noqa: E402
from processor.localkafka.broker import LocalBroker  # noqa: E402

# ------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="300k words, 100k/1M keys, no recovery"
    )
    parser.add_argument("--words", type=int, help="corpus size per system")
    parser.add_argument("--systems", default=",".join(PEERS), help="comma-separated subset")
    parser.add_argument(
        "--latency-rates", help="words/s of the latency phase, comma-separated (20000,5000)"
    )
    parser.add_argument(
        "--latency-intervals",
        help="checkpoint/commit intervals (ms) of the latency phase, comma-separated "
        "(full: 100,250,500,1000; quick: 1000)",
    )
    parser.add_argument(
        "--half-max",
        action=argparse.BooleanOptionalAction,
        help="latency also at half of each system's steady-state (backlog) median; the live "
        "highest sustainable rate and the latency at half of it: bench/sustainable.py",
    )
    parser.add_argument(
        "--latency-seconds", type=float, help="latency phase: seconds measured per run (quick 10)"
    )
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument(
        "--latency-systems",
        help="latency phase: only these of --systems, comma-separated (CI: processor; the "
        "phase's code is the same for every system, whose start the other phases run)",
    )
    parser.add_argument("--no-recovery", action="store_true")
    parser.add_argument("--no-scaling", action="store_true", help="no state-scaling phase")
    parser.add_argument(
        "--scaling-keys", help="state sizes (distinct keys) of the scaling phase, comma-separated"
    )
    parser.add_argument("--no-steady", action="store_true", help="no steady-state phase")
    parser.add_argument(
        "--no-capacity", action="store_true", help="no balanced live capacity phase"
    )
    parser.add_argument("--reps", type=int, help="steady state: runs per row (full 5, quick 1)")
    parser.add_argument(
        "--rows",
        help="steady state: only these rows of --systems, comma-separated (flink_preagg,ceiling)",
    )
    parser.add_argument(
        "--steady-words", type=int, help="steady state: words in the shared input topic"
    )
    parser.add_argument("--warmup", type=float, help="steady state: warm-up seconds")
    parser.add_argument("--window", type=float, help="steady state: window seconds")
    parser.add_argument(
        "--seed", type=int, default=11, help="steady state: the seed of the run order"
    )
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (broker, logs)")
    parser.add_argument(
        "--port",
        type=int,
        default=PORT,
        help=f"the bench's broker port, its controller's the next one (default {PORT})",
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=RESULTS,
        help=f"where <timestamp>.json/.png and latest.md/.png go (default {RESULTS})",
    )
    parser.add_argument(
        "--render",
        type=Path,
        metavar="JSON",
        help="only rewrite latest.md and the figures (<JSON>.png, latest.png) from a results file",
    )
    parser.add_argument(
        "--with-capacity",
        type=Path,
        nargs="+",
        metavar="CAPACITY_JSON",
        help="bench/capacity.py results files (measuring the same code) as the capacity "
        "phase: with --render, put them into that results file and render it; in a run, "
        "instead of measuring it (the latency at half the capacity needs it; a full run in "
        "sittings)",
    )
    args = parser.parse_args(argv)
    results: Path = args.results_dir
    if args.render:
        rendered = json.loads(args.render.read_text())
        if args.with_capacity:
            rendered["capacity"] = _sittings(parser, args.with_capacity, rendered)
        if rendered.get("steady") or rendered.get("capacity"):
            # Summaries and the headline from the runs themselves, as this version computes
            # them.
            if rendered.get("steady"):
                summarize_steady(rendered["steady"])
            rendered["headline"] = headline(rendered)
            args.render.write_text(json.dumps(rendered, indent=2) + "\n")
        results.mkdir(parents=True, exist_ok=True)
        (results / "latest.md").write_text(markdown(rendered))
        png = args.render.with_suffix(".png")
        write_plot(plot_python(), args.render, png)
        if png != results / "latest.png":
            shutil.copyfile(png, results / "latest.png")
        say(f"wrote {results / 'latest.md'}, {png} and {results / 'latest.png'}")
        return 0
    sittings = None
    if args.with_capacity:  # the capacity measured before: latency at half of it
        sittings = _sittings(parser, args.with_capacity, {"source": source_version()})
        args.no_capacity = True
    mode = QUICK if args.quick else FULL
    if args.words:
        mode = Mode(**{**mode.__dict__, "words": args.words})
    if args.latency_rates:
        rates = tuple(int(r) for r in args.latency_rates.split(","))
        mode = Mode(**{**mode.__dict__, "latency_rates": rates})
    if args.latency_intervals:
        intervals = tuple(int(i) for i in args.latency_intervals.split(","))
        mode = dataclasses.replace(mode, latency_intervals=intervals)
    if args.latency_seconds:
        mode = dataclasses.replace(mode, latency_s=args.latency_seconds)
    if args.half_max is not None:
        mode = dataclasses.replace(mode, latency_half_max=args.half_max)
    if args.scaling_keys:
        sizes = tuple(int(k) for k in args.scaling_keys.split(","))
        mode = Mode(**{**mode.__dict__, "scaling_keys": sizes})
    steady = QUICK_STEADY if args.quick else FULL_STEADY
    overrides = {
        "reps": args.reps,
        "words": args.steady_words,
        "warmup_s": args.warmup,
        "window_s": args.window,
    }
    steady = dataclasses.replace(steady, **{k: v for k, v in overrides.items() if v is not None})
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = set(names) - PEERS.keys()
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}; known: {list(PEERS)}")
    peers = [PEERS[n]() for n in names]
    timed = names
    if args.latency_systems is not None:
        timed = [n.strip() for n in args.latency_systems.split(",") if n.strip()]
        if not set(timed) <= set(names):
            parser.error(f"--latency-systems {timed}: not all of --systems {names}")
    try:
        chosen = steady_row_keys(names, args.rows)
    except ValueError as exc:
        parser.error(str(exc))

    # The rows' peers too: a variant may have a build of its own (Flink SQL's jar).
    for peer in [*peers, *(row.peer for row in steady_rows(names))]:
        say(f"preparing {peer.title}")
        peer.prepare()
    if not args.no_capacity or mode.latency_half_max:
        say("preparing the load generator")
        loadgen.prepare()
    say("preparing matplotlib (for the figure)")
    plotter = plot_python()

    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    run_id = stamp.replace("-", "")
    say(f"corpus: {mode.words:,} words, seed 1")
    text = list(corpus.lines(mode.words, seed=1))
    lines = [line.encode() for line in text]
    expected = dict(exact_counts(text))
    del text

    tmp = Path(tempfile.mkdtemp(prefix="bench-run-"))
    broker = LocalBroker(port=args.port, controller_port=args.port + 1, data_dir=tmp / "kafka")
    report: dict[str, Any] = {
        "timestamp": stamp,
        "mode": mode.__dict__,
        "machine": _machine(),
        "source": source_version(),
        "corpus": {
            "lines": len(lines),
            "words": sum(expected.values()),
            "distinct_words": len(expected),
        },
        "systems": {},
        "steady": None,
        "latency": {},
        "latency_by_interval": {},
        "state_scaling": {},
        "recovery": None,
    }
    failed = False
    with terminate_as_interrupt():
        try:
            say(f"starting the broker on {broker.bootstrap} (data in {broker.data_dir})")
            broker.start()
            for peer in peers:
                try:
                    report["systems"][peer.name] = throughput(
                        peer,
                        broker,
                        lines,
                        expected,
                        tmp,
                        run_id,
                        mode.timeout_s,
                    )
                except BrokerDied:
                    raise
                except Exception as exc:  # noqa: BLE001 - one system's crash is its result
                    traceback.print_exc()
                    report["systems"][peer.name] = {
                        "system": peer.title,
                        "ok": False,
                        "error": repr(exc),
                    }
                failed |= not report["systems"][peer.name]["ok"]
            if not args.no_steady:
                rows = steady_rows(names)
                if args.quick:  # CI: only rows that run code of their own
                    rows = [r for r in rows if r.key not in SETTING_ONLY]
                if chosen is not None:
                    rows = [r for r in rows if r.key in chosen]
                report["steady"] = steady_state(rows, broker, steady, tmp, run_id, args.seed)
                failed |= any(
                    not r.get("ok")
                    for row in report["steady"]["rows"].values()
                    for r in row["runs"]
                )
            if sittings is not None:
                report["capacity"] = sittings
            elif not args.no_capacity:
                report["capacity"] = capacity_phase(
                    names, broker, steady.reps, tmp, run_id, args.quick, args.seed
                )
                failed |= any(
                    not r.get("ok")
                    for row in report["capacity"]["rows"].values()
                    for r in row["runs"]
                )
            if not args.no_latency:
                chosen_peers = [peer for peer in peers if peer.name in timed]
                sweep = latency_phase(chosen_peers, broker, mode, report, tmp, run_id)
                report["latency_by_interval"] = sweep
                # The fixed rates at the common interval: the headline's and earlier reports'.
                common = sweep.get(str(INTERVAL_MS), {})
                report["latency"] = {k: v for k, v in common.items() if k != "half_max"}
            if mode.scaling_keys and not args.no_scaling and "processor" in names:
                report["state_scaling"] = scaling(broker.bootstrap, mode, tmp, run_id)
                failed |= any("error" in r for r in report["state_scaling"].values())
            if mode.recovery_words and not args.no_recovery and "processor" in names:
                report["recovery"] = recovery(broker.bootstrap, mode.recovery_words)
        except BrokerDied as exc:
            failed = True
            report["aborted"] = str(exc)
            say(f"ABORTED: {exc}")
        except BaseException:
            failed = True
            raise
        finally:
            say("stopping the broker")
            broker.stop()
            if failed or args.keep:
                say(f"kept {tmp} (broker data and logs)")
            else:
                shutil.rmtree(tmp, ignore_errors=True)

    report["headline"] = headline(report)
    results.mkdir(parents=True, exist_ok=True)
    source = results / f"{stamp}.json"
    source.write_text(json.dumps(report, indent=2) + "\n")
    table = markdown(report)
    (results / "latest.md").write_text(table)
    print(table, file=sys.stderr)
    png = results / f"{stamp}.png"
    try:
        write_plot(plotter, source, png)
        shutil.copyfile(png, results / "latest.png")
        say(f"wrote {source}, {png}, {results / 'latest.md'} and {results / 'latest.png'}")
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        failed = True
        say(f"wrote {source} and {results / 'latest.md'}; the figure FAILED: {exc}")
    print(json.dumps(report["headline"]), flush=True)
    return 1 if failed else 0


def _sittings(
    parser: argparse.ArgumentParser, paths: list[Path], results: dict[str, Any]
) -> dict[str, Any]:
    """The capacity phase from bench/capacity.py's reports at ``paths``, each of which must
    have measured the code ``results`` measured."""
    sittings = [json.loads(path.read_text()) for path in paths]
    ours = results["source"]["commit"]
    for path, sitting in zip(paths, sittings, strict=True):
        if not same_measured_code(ours, sitting.get("commit")):
            parser.error(
                f"{path} measured {sitting.get('commit')}, the results {ours}: the code "
                "measured differs between them"
            )
    try:
        return capacity.join_sittings(sittings)
    except ValueError as exc:
        parser.error(str(exc))


def _machine() -> str:
    import platform

    return f"{os.cpu_count()} cores, {platform.python_implementation()} {platform.python_version()}"


if __name__ == "__main__":
    sys.exit(main())
