"""``tidal simulate``: load a scenario (and a trace), run it under a policy, print and write the report."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autoscaler.config import ConfigError, read_document
from autoscaler.sim.baselines import planner_for
from autoscaler.sim.engine import Record, Simulation, build_config
from autoscaler.sim.lower_bound import lower_bound
from autoscaler.sim.report import summary, timeline_text, write_report
from autoscaler.sim.scenario import Scenario, ScenarioError, load_scenario
from autoscaler.sim.trace import load_trace

DEFAULT_CATALOG = Path(__file__).resolve().parents[2] / "config" / "catalogs" / "aws-us-east-1.csv"


@dataclass(slots=True)
class Outcome:
    record: Record
    summary: dict[str, Any]
    files: list[str]


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
    config_file: str | None = None,
    report_dir: str | None = None,
    bound: bool = True,
    echo: Callable[[str], None] | None = None,
) -> Outcome:
    """Run one scenario under one policy; the record, its summary, and the report files written."""
    # Read as `tidal plan --config` reads it: unreadable, non-UTF-8, duplicate keys and non-maps are errors.
    overrides: dict[str, Any] = dict(read_document(config_file)) if config_file else {}
    catalog_path = str(catalog or DEFAULT_CATALOG)
    config = build_config(
        scenario,
        overrides,
        catalog=catalog_path,
        cloud=cloud,
        region=region,
        overrides_source=config_file or "--config",
    )
    sim = Simulation(scenario, config, _provider, policy=policy, planner=planner_for(policy), echo=echo)
    record = sim.run()
    offerings = sim.provider.offerings()
    vcpus = {o.instance_type: o.vcpu for o in offerings}
    lb = (
        lower_bound([*record.pods, *record.cut_runs], offerings, config, record.end, scenario.outages)
        if bound
        else None
    )
    doc = summary(record, vcpus, lower_bound=lb)
    files = write_report(record, doc, Path(report_dir)) if report_dir else []
    return Outcome(record, doc, files)


def run_cli(args: Any) -> int:
    """Entry point of ``tidal simulate`` (arguments parsed by autoscaler.cli)."""
    from autoscaler.observability.logging import configure_logging

    configure_logging(
        "console", "error", stream=sys.stderr
    )  # the timeline is the output; log lines would bury it
    try:
        if args.report:
            # Before the run, which can take minutes: a path that cannot be a directory fails now.
            try:
                Path(args.report).mkdir(parents=True, exist_ok=True)
            except FileExistsError:
                raise ScenarioError(f"--report: {args.report} is a file, not a directory") from None
            except OSError as err:
                raise ScenarioError(f"--report: {args.report}: {err.strerror or err}") from None
        scenario = load_scenario(args.scenario)
        if args.trace:
            jobs = load_trace(
                args.trace,
                compression=args.compression,
                sample=args.sample,
                start=args.start,
                window=args.window,
                seed=args.seed,
            )
            if not jobs:
                raise ScenarioError(f"{args.trace}: no pods in the chosen window and sample")
            end = max(j.at + j.duration for j in jobs) + 3600
            scenario = replace(
                scenario,
                jobs=tuple(jobs),
                duration=min(scenario.duration, end) if args.window is None else end,
            )
        out = simulate(
            scenario,
            policy=args.policy,
            catalog=args.catalog,
            cloud=args.cloud or "",
            region=args.region or "",
            config_file=args.config,
            report_dir=args.report,
            bound=not args.no_bound,
        )
    except ConfigError as err:
        print(f"tidal: error: {err}", file=sys.stderr)
        return 2
    for line in timeline_text(out.record)[: args.max_lines]:
        print(line)
    s = out.summary
    print()
    print(
        f"{s['scenario']} under {s['policy']}: cost ${s['cost']['total']:.2f}"
        + (f" ({s['cost']['overLowerBound']:.3f} x lower bound)" if "overLowerBound" in s["cost"] else "")
        + f"; GPU-hours {s['gpuHours']['provisioned']} provisioned / {s['gpuHours']['requested']} requested;"
        f" over-limit launches {s['overLimitLaunches']}; GPU limit violations {s['gpuLimitViolations']};"
        f" pods never served {s['podsNeverServed']}; {s['wallSeconds']}s wall"
    )
    if out.files:
        print(f"report: {', '.join(str(Path(args.report) / f) for f in out.files)}")
    return 0
