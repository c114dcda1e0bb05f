"""The ``tidal`` command line."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version

from autoscaler.catalog import CatalogError, read_catalog_csv
from autoscaler.cloud import ProviderError, ProviderNotFound
from autoscaler.config import ConfigError, load_config
from autoscaler.fit import AnnotationError
from autoscaler.kube.client import KubeConfigError
from autoscaler.kube.convert import ConversionError
from autoscaler.planning import plan
from autoscaler.quantity import QuantityError
from autoscaler.render import plan_to_json, plan_to_table, snapshot_footer
from autoscaler.sim.scenario import ScenarioError
from autoscaler.snapshot import SnapshotError, read_snapshots

EXIT_BAD_INPUT = 2


class UsageError(ValueError):
    """A command-line argument that is wrong; printed as one line."""


def _version() -> str:
    try:
        return version("tidal-autoscaler")
    except PackageNotFoundError:
        return "unknown"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def parse_time_arg(text: str) -> float:
    """``--now`` in RFC 3339 (``2026-11-20T10:00:00Z``) → epoch seconds."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"--now: {text!r} is not an RFC 3339 time (e.g. 2026-11-20T10:00:00Z)") from None
    if parsed.tzinfo is None:
        # A time without an offset would mean this machine's local time: the plan would depend on it.
        raise UsageError(
            f"--now: {text!r} has no time zone; give an RFC 3339 time with Z or an offset "
            "(e.g. 2026-11-20T10:00:00Z or 2026-11-20T11:00:00+01:00)"
        )
    return parsed.timestamp()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tidal", description="Queue-aware, cost-aware cluster autoscaler for Kubernetes.")
    parser.add_argument("--version", action="version", version=f"tidal {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("plan", help="offline dry run: what tidal would launch and remove for a snapshot")
    p.add_argument(
        "--snapshot",
        action="append",
        required=True,
        type=_given,
        metavar="FILE",
        help="Kubernetes List document (YAML or JSON); repeatable",
    )
    p.add_argument("--catalog", required=True, type=_given, metavar="CSV", help="instance catalog CSV")
    p.add_argument("--config", type=_given, metavar="FILE", help="tidal configuration YAML")
    p.add_argument("--now", metavar="RFC3339", help="evaluation time (default: the current time)")
    p.add_argument("--output", choices=("table", "json"), default="table")

    c = sub.add_parser("catalog", help="the offerings and prices the configured cloud provider sees")
    c.add_argument(
        "--config",
        type=_given,
        metavar="FILE",
        help="tidal configuration YAML (cloud, region, provider section)",
    )
    c.add_argument("--cloud", type=_given, help="override the configured cloud")
    c.add_argument("--region", type=_given, help="override the configured region")
    c.add_argument("--gpu-only", action="store_true", help="only offerings with GPUs")
    c.add_argument(
        "--output",
        choices=("table", "json", "csv"),
        default="table",
        help="csv loads back as a --catalog file",
    )

    s = sub.add_parser("simulate", help="replay a scenario or a trace on a virtual clock and report")
    s.add_argument(
        "--scenario",
        required=True,
        type=_given,
        metavar="NAME|FILE",
        help="kai-day, spot-storm, burst-10k, or a scenario YAML file",
    )
    s.add_argument(
        "--trace", type=_given, metavar="CSV", help="replay pods of a trace CSV (Alibaba GPU trace columns)"
    )
    s.add_argument("--compression", type=_positive, default=1.0, help="divide trace times by this factor")
    s.add_argument("--sample", type=_fraction, default=1.0, help="keep this fraction of trace pods")
    s.add_argument("--start", type=_seconds, default=0.0, help="trace time to start from (seconds)")
    s.add_argument("--window", type=_seconds, default=None, help="trace seconds to replay from --start")
    s.add_argument("--seed", type=int, default=0, help="seed for sampling")
    s.add_argument(
        "--catalog", type=_given, metavar="CSV", help="instance catalog (default: the AWS demo catalog)"
    )
    s.add_argument("--cloud", type=_given, help="which cloud's rows of a multi-cloud catalog to offer")
    s.add_argument("--region", type=_given, help="which region's rows of the catalog to offer")
    s.add_argument(
        "--config", type=_given, metavar="FILE", help="tidal configuration keys over the scenario's"
    )
    s.add_argument("--policy", choices=("tidal", "ca-like", "karpenter-like"), default="tidal")
    s.add_argument(
        "--report", type=_given, metavar="DIR", help="write summary.json, report.md and timeline.png here"
    )
    s.add_argument("--no-bound", action="store_true", help="skip the LP lower bound")
    s.add_argument("--max-lines", type=int, default=400, help=argparse.SUPPRESS)

    r = sub.add_parser("run", help="the autoscaler daemon: watch the cluster, launch and remove nodes")
    r.add_argument(
        "--config",
        metavar="FILE",
        action="append",
        help="configuration file (the mounted ConfigMap); hot reloaded. Repeat it to lay files over each "
        "other, later ones winning (e.g. a cloud's config.yaml, then the KAI preset's kai.yaml)",
    )
    r.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube/config)"
    )
    r.add_argument("--dry-run", action="store_true", help="decide and report, but change nothing")
    r.add_argument("--once", action="store_true", help="one reconcile, then exit")
    return parser


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
    return value


def _fraction(text: str) -> float:
    value = _positive(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at most 1")
    return value


def _given(text: str) -> str:
    # An empty value would otherwise read as "not given" (the default) or, for a path, as the current directory.
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def _seconds(text: str) -> float:
    from autoscaler.config import parse_duration

    try:
        return parse_duration(text, field="time")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def cmd_simulate(args: argparse.Namespace) -> int:
    from autoscaler.sim.run import run_cli

    return run_cli(args)


def cmd_catalog(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from autoscaler.cloud import load_provider
    from autoscaler.observability.logging import configure_logging

    config = load_config(args.config)
    # Output is the catalog itself (JSON for programs): provider warnings go to stderr.
    configure_logging(config.log_format, "warning", stream=sys.stderr)
    if args.cloud or args.region:
        config = replace(config, cloud=args.cloud or config.cloud, region=args.region or config.region)
    provider = load_provider(config.cloud, config)
    offerings = sorted(provider.offerings(), key=lambda o: (o.instance_type, o.zone, o.capacity_type))
    if args.gpu_only:
        offerings = [o for o in offerings if o.gpu_count]
    if args.output == "csv":
        from autoscaler.catalog import write_catalog_csv

        write_catalog_csv(offerings, sys.stdout, cloud=config.cloud, region=config.region)
        return 0
    if args.output == "json":
        print(
            json.dumps(
                [
                    {
                        "instanceType": o.instance_type,
                        "zone": o.zone,
                        "capacityType": o.capacity_type,
                        "vcpu": o.vcpu,
                        "memoryMiB": o.memory_mib,
                        "gpus": o.gpu_count,
                        "gpuModel": o.gpu_model,
                        "gpuMemoryMiB": o.gpu_memory_mib,
                        "arch": o.arch.value,
                        "maxPods": o.max_pods,
                        "pricePerHour": o.price,
                        "priceSource": o.price_source,
                        "available": o.available,
                    }
                    for o in offerings
                ],
                indent=2,
            )
        )
        return 0
    from autoscaler.render import table

    print(
        "\n".join(
            table(
                [
                    "INSTANCE TYPE",
                    "ZONE",
                    "CAPACITY",
                    "VCPU",
                    "MEMORY",
                    "GPUS",
                    "$/HOUR",
                    "PRICE SOURCE",
                    "AVAILABLE",
                ],
                [
                    [
                        o.instance_type,
                        o.zone or "-",
                        o.capacity_type,
                        str(o.vcpu),
                        f"{o.memory_mib / 1024:g}Gi",
                        f"{o.gpu_count} {o.gpu_model}".strip(),
                        f"{o.price:.4f}",
                        o.price_source or "-",
                        "yes" if o.available else "no",
                    ]
                    for o in offerings
                ],
            )
        )
    )
    print(f"{len(offerings)} offerings for {config.cloud} {config.region}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from autoscaler.daemon import run

    return run(args.config, args.kubeconfig, dry_run=args.dry_run, once=args.once)


def cmd_plan(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    now = parse_time_arg(args.now) if args.now is not None else datetime.now(UTC).timestamp()
    loaded = read_snapshots(args.snapshot)
    offerings = read_catalog_csv(
        args.catalog,
        cloud=config.cloud,
        region=config.region,
        zones=config.zones,
        max_pods=config.max_pods_per_node,
    )
    if not offerings:
        raise CatalogError(f"{args.catalog}: no rows for cloud {config.cloud!r} region {config.region!r}")
    result = plan(loaded.snapshot, offerings, config, now)
    if args.output == "json":
        doc = plan_to_json(result)
        doc["skippedObjects"] = dict(sorted(loaded.skipped.items()))
        doc["duplicateObjects"] = dict(sorted(loaded.duplicates.items()))
        print(json.dumps(doc, indent=2))
    else:
        sys.stdout.write(plan_to_table(result, config))
        sys.stdout.write(snapshot_footer(loaded))
    return 0


# What a user can get wrong: these are one line on stderr and exit status 2. Any other exception is a bug in
# tidal and keeps its traceback.
BAD_INPUT = (
    UsageError,
    ConfigError,
    SnapshotError,
    CatalogError,
    QuantityError,
    ConversionError,
    AnnotationError,
    ScenarioError,
)

COMMANDS = {"plan": cmd_plan, "simulate": cmd_simulate, "catalog": cmd_catalog, "run": cmd_run}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tidal`` console script."""
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except BAD_INPUT as err:
        print(f"tidal: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (ProviderNotFound, ProviderError, KubeConfigError) as err:
        # Provider settings, cluster access and cloud errors at start-up: one line, never a traceback.
        print(f"tidal: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
