"""``tidal simulate``: load a scenario (and a trace), run it under a policy, print and write the report.

``prepare`` turns a scenario and the command line's trace and catalog choices into what one run needs; the
benchmark suite calls it too, so ``tidal simulate --scenario alibaba-week`` runs exactly the benchmark's week.
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autoscaler.config.layers import Layers, read_layers
from autoscaler.config.options import ConfigError
from autoscaler.sim.baselines import planner_for
from autoscaler.sim.configuration import GPU_READY_DELAY, LAUNCH_DELAY, REGISTRATION_DELAY, build_config
from autoscaler.sim.cost_causes import causes
from autoscaler.sim.engine import Simulation
from autoscaler.sim.lower_bound import Boot, lower_bound
from autoscaler.sim.record import Record
from autoscaler.sim.report import REPORT_FILES, never_served_line, shown_timeline, summary, write_report
from autoscaler.sim.scenario import DATA_ENV, Scenario, ScenarioError
from autoscaler.sim.trace import GPU_SHARING, load_trace

DEFAULT_CATALOG = Path(__file__).resolve().parents[2] / "config" / "catalogs" / "aws-us-east-1.csv"
TRACE_FRAME = "trace"
# After the last pod of a trace window is submitted, the run goes on this long for it to be served.
TRACE_TAIL = 3600.0
EXIT_NOTHING_RAN = 1
EXIT_INTERRUPTED = 130  # what a shell reports for a command Ctrl-C (SIGINT) stopped
# What the simulated cloud takes from a launch to a node that runs pods (with its GPUs, for GPU pods).
BOOT = Boot(LAUNCH_DELAY + REGISTRATION_DELAY, LAUNCH_DELAY + REGISTRATION_DELAY + GPU_READY_DELAY)
# Python's cycle collector while a scenario runs: a run keeps hundreds of thousands of objects alive (pods,
# Nodes, instances, the planner's kept rooms), and at the default thresholds a full collection walks all of
# them again and again; a third of a 3,000-node run went to that. Collected as rarely as this, a run's
# memory stays as it was (its garbage is freed by reference counting, not by the collector).
GC_THRESHOLDS = (100_000, 50, 100)


@dataclass(slots=True)
class Outcome:
    record: Record
    summary: dict[str, Any]
    files: list[str]


@dataclass(frozen=True, slots=True)
class Prepared:
    """A scenario with its trace's jobs loaded, and the catalog (with its cloud and region) to price it."""

    scenario: Scenario
    catalog: str | None = None
    cloud: str = ""
    region: str = ""


def prepare(
    scenario: Scenario,
    *,
    trace: str | None = None,
    compression: float = 1.0,
    sample: float = 1.0,
    start: float | None = None,
    window: float | None = None,
    seed: int = 0,
    catalog: str | None = None,
    cloud: str = "",
    region: str = "",
    gpu_sharing: str | None = None,
) -> Prepared:
    """The run a scenario describes, with the command line's choices over the scenario's own (``trace`` for
    its trace file, ``start``/``window`` for the part replayed, ``gpu_sharing`` for how pods that used part of
    a GPU ask for it, ``catalog``/``cloud``/``region``)."""
    spec = scenario.trace
    if trace is not None or spec is not None:
        path = trace if trace is not None else str(spec.file) if spec else ""
        if trace is None and not Path(path).is_file():
            raise ScenarioError(
                f"{scenario.name}: its trace {path} is not there; set {DATA_ENV} to the directory holding "
                "traces/ and catalog/, or give --trace"
            )
        first = start if start is not None else spec.start if spec else 0.0
        span = window if window is not None else spec.window if spec else None
        sharing = gpu_sharing or (spec.gpu_sharing if spec else "") or GPU_SHARING[0]
        jobs = load_trace(
            path,
            compression=compression,
            sample=sample,
            start=first,
            window=span,
            seed=seed,
            gpu_sharing=sharing,
        )
        if not jobs:
            raise ScenarioError(f"{path}: no pods in the chosen window and sample")
        if span is not None:
            duration = span / compression + TRACE_TAIL
        else:
            duration = min(scenario.duration, max(j.at + j.duration for j in jobs) + TRACE_TAIL)
        scenario = replace(scenario, jobs=tuple(jobs), duration=duration)
    own = scenario.catalog
    if catalog is None and own is not None:
        if not own.file.is_file():
            raise ScenarioError(
                f"{scenario.name}: its catalog {own.file} is not there; set {DATA_ENV} to the directory "
                "holding traces/ and catalog/, or give --catalog"
            )
        return Prepared(scenario, str(own.file), cloud or own.cloud, region or own.region)
    return Prepared(scenario, catalog, cloud, region)


def reservation_fee(scenario: Scenario, offerings: Sequence[Any], end: float) -> float:
    """What the scenario's reservations cost over a run of ``end`` seconds, used or not: their instances at
    the on-demand price for as long as each lasts (a Capacity Block's price is close to that)."""
    prices = {(o.instance_type, o.zone): o.price for o in offerings if o.capacity_type == "on-demand"}
    fee: float = sum(
        r.count * prices.get((r.instance_type, r.zone), 0.0) * r.hours(end) for r in scenario.reservations
    )
    return fee


def _provider(config: Any, *, clock: Callable[[], float], kube: Any) -> Any:
    from autoscaler.cloud import load_provider

    return load_provider("simulated", config, clock=clock, kube=kube)


def simulate(
    scenario: Scenario,
    *,
    policy: str = "tidal",
    catalog: str | None = None,
    cloud: str = "",
    region: str = "",
    config_files: Sequence[str] = (),
    report_dir: str | None = None,
    bound: bool = True,
    echo: Callable[[str], None] | None = None,
) -> Outcome:
    """Run one scenario under one policy; the record, its summary, and the report files written.

    ``config_files`` are laid over each other (as every subcommand's repeated ``--config``) and over the
    scenario's ``config:`` block.
    """
    layers = read_layers(config_files)
    return _simulate(scenario, layers, policy, catalog, cloud, region, report_dir, bound, echo)


@contextlib.contextmanager
def few_collections() -> Iterator[None]:
    """Python's cycle collector set to ``GC_THRESHOLDS`` for the duration, then put back as it was."""
    before = gc.get_threshold()
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


@few_collections()
def _simulate(
    scenario: Scenario,
    layers: Layers,
    policy: str,
    catalog: str | None,
    cloud: str,
    region: str,
    report_dir: str | None,
    bound: bool,
    echo: Callable[[str], None] | None,
) -> Outcome:
    catalog_path = str(catalog or DEFAULT_CATALOG)
    config = build_config(
        scenario,
        dict(layers.document),
        catalog=catalog_path,
        cloud=cloud,
        region=region,
        overrides_source=layers.source if layers.files else "--config",
    )
    sim = Simulation(scenario, config, _provider, policy=policy, planner=planner_for(policy), echo=echo)
    record = sim.run()
    # Reserved capacity is paid for as a fee, not per node: the bound prices what can be bought.
    offerings = [o for o in sim.provider.offerings() if o.reservation is None]
    vcpus = {o.instance_type: o.vcpu for o in offerings}
    lb = (
        lower_bound([*record.pods, *record.cut_runs], offerings, config, record.end, scenario.outages, BOOT)
        if bound
        else None
    )
    fee = reservation_fee(scenario, offerings, record.end)
    above = (
        causes(record, offerings, config, lb, reservations=fee, boot=BOOT, outages=scenario.outages)
        if lb
        else None
    )
    doc = summary(record, vcpus, lower_bound=lb, reservations=fee, causes=above)
    files = write_report(record, doc, Path(report_dir)) if report_dir else []
    return Outcome(record, doc, files)


def run_cli(args: Any, scenario: Scenario) -> int:
    """Entry point of ``tidal simulate``: ``scenario`` loaded and the arguments checked by autoscaler.cli.main."""
    from autoscaler.runtime.observability.logging import configure_logging

    configure_logging(
        "console", "error", stream=sys.stderr
    )  # the timeline is the output; log lines would bury it
    report = Path(args.report) if args.report else None
    made = report is not None and not report.exists()
    try:
        return _run_cli(args, scenario)
    except KeyboardInterrupt:
        # Ctrl-C: a report folder this run made is removed rather than left empty or half written.
        removed = _unmake(report) if made and report is not None else False
        what = f"; {report} removed" if removed else (f"; nothing written to {report}" if report else "")
        print(f"tidal: interrupted{what}", file=sys.stderr)
        return EXIT_INTERRUPTED


def _unmake(report: Path) -> bool:
    """Remove the report folder this run made, with the files it wrote there: whether it is gone."""
    for name in REPORT_FILES:
        (report / name).unlink(missing_ok=True)
    try:
        report.rmdir()
    except OSError:
        return False  # something else was put there meanwhile: leave it
    return True


def _run_cli(args: Any, scenario: Scenario) -> int:
    try:
        if args.report:
            # Before the run, which can take minutes: a path that cannot be a directory fails now.
            try:
                Path(args.report).mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                raise ScenarioError(f"--report: {args.report} is a file, not a directory") from None
            except OSError as err:
                raise ScenarioError(f"--report: {args.report}: {err.strerror or err}") from None
        layers = read_layers(args.config or [])
        run = prepare(
            scenario,
            trace=args.trace,
            compression=args.compression,
            sample=args.sample,
            start=args.start,
            window=args.window,
            seed=args.seed,
            catalog=args.catalog[0] if args.catalog else None,
            cloud=args.cloud or "",
            region=args.region or "",
            gpu_sharing=args.gpu_sharing,
        )
        read = (
            f"{layers.describe()} over scenario {scenario.name}'s"
            if layers.files
            else (f"scenario {scenario.name}'s (no --config given)")
        )
        print(f"tidal: configuration: {read}", file=sys.stderr)
        for override in layers.overrides:
            print(f"tidal: warning: {override.describe()}", file=sys.stderr)
        out = _simulate(
            run.scenario,
            layers,
            args.policy,
            run.catalog,
            run.cloud,
            run.region,
            args.report,
            not args.no_bound,
            None,
        )
    except ConfigError as err:
        print(f"tidal: error: {err}", file=sys.stderr)
        return 2
    for line in shown_timeline(out.record, args.max_lines, args.report):
        print(line)
    s = out.summary
    print()
    print(
        f"{s['scenario']} under {s['policy']}: cost ${s['cost']['total']:.2f}"
        + (f" ({s['cost']['overLowerBound']:.3f} x lower bound)" if "overLowerBound" in s["cost"] else "")
        + f"; GPU-hours {s['gpuHours']['provisioned']} provisioned / {s['gpuHours']['requested']} requested;"
        f" over-limit launches {s['overLimitLaunches']}; GPU limit violations {s['gpuLimitViolations']};"
        f" pods ran {s['pods']['ran']} of {s['pods']['submitted']}, never served {s['podsNeverServed']};"
        f" {s['wallSeconds']}s wall"
    )
    if out.files:
        print(f"report: {', '.join(str(Path(args.report) / f) for f in out.files)}")
    if s["podsNeverServed"]:
        print(f"tidal: {never_served_line(s)}", file=sys.stderr)
    if not s["pods"]["ran"]:
        # Costs of $0.00 for a run that served nothing are not a result: say so, and fail scripts.
        print("tidal: error: no pod ran in this simulation", file=sys.stderr)
        return EXIT_NOTHING_RAN
    return 0
