"""The ``tidal`` command line.

Only ``argparse`` and the standard library are imported up front: ``tidal --version`` and a usage error answer
at once, and each subcommand imports what it needs when it runs. ``tidal plan`` and ``tidal simulate`` never
import the Kubernetes client or a cloud SDK (a test checks it).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import NoReturn

from autoscaler.sim.built_in import BUILT_IN
from autoscaler.version import __version__

EXIT_BAD_INPUT = 2
EXIT_BROKEN_PIPE = 128 + 13  # what a shell reports for a command a closed pipe stopped (SIGPIPE)
TRACE_ONLY = ("compression", "sample", "start", "window", "seed", "gpu_sharing")


class UsageError(ValueError):
    """A command-line argument that is wrong; printed as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # main() prints "tidal: error: ": a subcommand's parser adds only its own name ("plan: ...").
        where = self.prog.removeprefix("tidal").strip()
        raise UsageError(f"{where}: {message}" if where else message)


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


CONFIG_HELP = "configuration YAML; repeat it to lay files over each other, later files winning"
LOG_LEVELS = ("debug", "info", "warning", "error")
# --log-format's words, and the configuration's logFormat each stands for.
LOG_FORMATS = {"text": "console", "json": "json"}


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand and its options."""
    parser = _Parser(prog="tidal", description="Queue-aware, cost-aware cluster autoscaler for Kubernetes.")
    parser.add_argument("--version", action="version", version=f"tidal {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("plan", help="offline dry run: what tidal would launch and remove for a snapshot")
    p.add_argument(
        "--snapshot",
        action="append",
        required=True,
        type=_given,
        metavar="FILE",
        help="Kubernetes List document (YAML or JSON), as kubectl get -A -o yaml writes it; - reads it from "
        "standard input; repeatable",
    )
    p.add_argument(
        "--catalog",
        action="append",
        required=True,
        type=_given,
        metavar="CSV",
        help="instance catalog CSV; repeat it to lay catalogs over each other (a later file's instance type "
        "replaces every offering of that type in the earlier ones)",
    )
    p.add_argument("--config", action="append", type=_given, metavar="FILE", help=CONFIG_HELP)
    p.add_argument("--now", metavar="RFC3339", help="evaluation time (default: the current time)")
    p.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default="table",
        help="table: for people (default); json: the whole plan, every launch explained, for programs",
    )
    p.add_argument(
        "--explain",
        action="append",
        type=_given,
        metavar="POD",
        help="namespace/name of a pod: print its whole story (filters, candidates, where it went or why not) "
        "instead of the plan; repeatable",
    )

    c = sub.add_parser("catalog", help="the offerings and prices the configured cloud provider sees")
    c.add_argument("--config", action="append", type=_given, metavar="FILE", help=CONFIG_HELP)
    c.add_argument("--cloud", type=_given, help="override the configured cloud (aws, gcp, azure, simulated)")
    c.add_argument("--region", type=_given, help="override the configured region")
    c.add_argument("--gpu-only", action="store_true", help="only offerings with GPUs")
    c.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "csv"),
        default="table",
        help="table (default), json, or csv, which loads back as a --catalog file",
    )

    s = sub.add_parser("simulate", help="replay a scenario or a trace on a virtual clock and report")
    s.add_argument(
        "--scenario",
        type=_given,
        metavar="NAME|FILE",
        help=f"{', '.join(BUILT_IN)}, or a scenario YAML file "
        "(default with --trace: trace, the frame for trace replay)",
    )
    s.add_argument(
        "--trace", type=_given, metavar="CSV", help="replay pods of a trace CSV (Alibaba GPU trace columns)"
    )
    # Trace-only options default to None, so that giving one without a trace can be refused.
    s.add_argument("--compression", type=_positive, help="divide trace times by this factor (default 1)")
    s.add_argument("--sample", type=_fraction, help="keep this fraction of trace pods (default 1)")
    s.add_argument("--start", type=_seconds, help="trace time to start from (default 0)")
    s.add_argument("--window", type=_seconds, help="trace time to replay from --start (default: all)")
    s.add_argument("--seed", type=int, help="seed for --sample (default 0)")
    s.add_argument(
        "--gpu-sharing",
        choices=("kai", "whole"),
        help="how a trace pod that used part of a GPU asks for it: kai, a gpu-fraction share KAI packs onto a "
        "device (default), or whole, one nvidia.com/gpu that may be a partial-GPU instance size",
    )
    s.add_argument(
        "--catalog",
        action="append",
        type=_given,
        metavar="CSV",
        help="instance catalog (default: the scenario's, else the AWS demo catalog); one only",
    )
    s.add_argument("--cloud", type=_given, help="which cloud's rows of a multi-cloud catalog to offer")
    s.add_argument("--region", type=_given, help="which region's rows of the catalog to offer")
    s.add_argument(
        "--config",
        action="append",
        type=_given,
        metavar="FILE",
        help="configuration keys over the scenario's; repeat it to lay files over each other",
    )
    s.add_argument(
        "--policy",
        choices=("tidal", "ca-like", "karpenter-like"),
        default="tidal",
        help="who decides: tidal (default), or a baseline acting as cluster-autoscaler or Karpenter would",
    )
    s.add_argument(
        "--report", type=_given, metavar="DIR", help="write summary.json, report.md and timeline.png here"
    )
    s.add_argument("--no-bound", action="store_true", help="skip the LP lower bound")
    s.add_argument(
        "--max-lines",
        type=_count,
        default=400,
        metavar="N",
        help="timeline events printed at most (default 400); a last line says how many more there were",
    )

    r = sub.add_parser("run", help="the autoscaler daemon: watch the cluster, launch and remove nodes")
    r.add_argument(
        "--config",
        metavar="FILE",
        action="append",
        type=_given,
        help="configuration file (the mounted ConfigMap); hot reloaded. Repeat it to lay files over each "
        "other, later ones winning (e.g. a cloud's config.yaml, then the KAI preset's kai.yaml)",
    )
    r.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig (default: in-cluster, then ~/.kube/config)"
    )
    r.add_argument(
        "--context",
        type=_given,
        metavar="NAME",
        help="kubeconfig context to use (default: the kubeconfig's current context); reads the kubeconfig "
        "even inside a cluster",
    )
    r.add_argument("--dry-run", action="store_true", help="decide and report, but change nothing")
    r.add_argument("--once", action="store_true", help="one reconcile, then exit")
    r.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        help="least severe level logged (default: the configuration's logLevel, info); wins over the "
        "configuration, reloads included",
    )
    r.add_argument(
        "--log-format",
        choices=tuple(LOG_FORMATS),
        help="text (readable) or json (default: the configuration's logFormat, auto: text on a terminal, "
        "JSON otherwise); wins over the configuration, reloads included",
    )
    g = sub.add_parser(
        "config", help="check configuration files, or print the configuration's schema or reference"
    )
    what = g.add_subparsers(
        dest="what", required=True, parser_class=_Parser, metavar="{validate,schema,docs}"
    )
    v = what.add_parser(
        "validate", help="check configuration files: one line per problem, exit status 1 when there is any"
    )
    v.add_argument(
        "files",
        nargs="+",
        type=_given,
        metavar="FILE",
        help="configuration YAML (a ConfigMap's config.yaml, a preset); each is checked on its own",
    )
    what.add_parser("schema", help="the configuration's JSON Schema")
    what.add_parser("docs", help="the configuration reference in Markdown (docs/configuration.md)")
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


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
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
    from autoscaler.config.schema import parse_duration

    try:
        return parse_duration(text, field="time")
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _say(line: str) -> None:
    """A line about the run for the person at the terminal: stderr, so that stdout stays the output."""
    print(f"tidal: {line}", file=sys.stderr)


def cmd_simulate(args: argparse.Namespace) -> int:
    """``tidal simulate``: check what only the command line can know, then run the simulation."""
    from autoscaler.sim.run import TRACE_FRAME, run_cli
    from autoscaler.sim.scenario import load_scenario

    if args.cloud:
        from autoscaler.cloud import check_cloud

        check_cloud(args.cloud)
    if not args.scenario and not args.trace:
        raise UsageError("simulate: give --scenario NAME|FILE, or --trace CSV to replay a trace")
    if args.catalog and len(args.catalog) > 1:
        raise UsageError("simulate: --catalog is given more than once; a simulation is priced from one")
    scenario = load_scenario(args.scenario or TRACE_FRAME)
    given = [f"--{name.replace('_', '-')}" for name in TRACE_ONLY if getattr(args, name) is not None]
    if given and not args.trace and scenario.trace is None:
        raise UsageError(
            f"simulate: {', '.join(given)} only apply to a trace: give --trace CSV "
            f"(scenario {scenario.name} replays none)"
        )
    if not scenario.jobs and not args.trace and scenario.trace is None:
        raise UsageError(f"simulate: scenario {scenario.name} has no jobs: give --trace CSV to replay")
    args.compression = 1.0 if args.compression is None else args.compression
    args.sample = 1.0 if args.sample is None else args.sample
    args.seed = 0 if args.seed is None else args.seed
    return run_cli(args, scenario)


def cmd_catalog(args: argparse.Namespace) -> int:
    """``tidal catalog``: the offerings and prices the configured provider sees."""
    from dataclasses import replace

    from autoscaler.cli.render import offerings_json, offerings_table
    from autoscaler.cloud import load_provider
    from autoscaler.config.layers import load_layers
    from autoscaler.core.words import count
    from autoscaler.runtime.catalog import write_catalog_csv
    from autoscaler.runtime.observability.logging import configure_logging

    config, layers = load_layers(args.config or [])
    # Output is the catalog itself (JSON for programs): provider warnings go to stderr.
    configure_logging(config.log_format, "warning", stream=sys.stderr)
    for override in layers.overrides:
        _say(f"warning: {override.describe()}")
    if args.cloud or args.region:
        config = replace(config, cloud=args.cloud or config.cloud, region=args.region or config.region)
    provider = load_provider(config.cloud, config)
    offerings = sorted(provider.offerings(), key=lambda o: (o.instance_type, o.zone, o.capacity_type))
    if args.gpu_only:
        offerings = [o for o in offerings if o.gpu_count]
    if args.output == "csv":
        write_catalog_csv(offerings, sys.stdout, cloud=config.cloud, region=config.region)
    elif args.output == "json":
        print(offerings_json(offerings))
    else:
        print(offerings_table(offerings))
        print(f"{count(len(offerings), 'offering')} for {config.cloud} {config.region}")
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    """``tidal config validate|schema|docs``: check files, or what the configuration models say about every
    option."""
    import json

    if args.what == "validate":
        return _validate(args.files)
    from autoscaler.config.reference import json_schema, markdown

    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n" if args.what == "schema" else markdown())
    return 0


def _validate(files: Sequence[str]) -> int:
    """``tidal config validate``: each file checked as ``tidal run`` would read it, every problem one line
    naming the file, the field and the value; exit status 1 when any file has one."""
    from autoscaler.cloud import ProviderNotFound, check_cloud
    from autoscaler.config.options import ConfigError, load_config, read_document
    from autoscaler.core.words import count

    problems, bad = 0, 0
    for name in files:
        lines: list[str] = []
        try:
            cloud = load_config(name).cloud
        except ConfigError as err:
            lines += [" ".join(line.split()) for line in err.errors] or [str(err)]
            # The cloud is checked too, as the daemon would once the rest is right.
            try:
                raw = read_document(name).get("cloud")
            except ConfigError:
                raw = None
            cloud = raw if isinstance(raw, str) else ""
        if cloud:
            try:
                check_cloud(cloud)
            except ProviderNotFound as err:
                lines.append(str(err))
        for line in lines:
            print(f"{name}: {line}")
        if not lines:
            print(f"{name}: valid")
        problems += len(lines)
        bad += bool(lines)
    if problems:
        _say(f"{count(problems, 'problem')} in {bad} of {count(len(files), 'file')}")
    return 1 if problems else 0


def cmd_run(args: argparse.Namespace) -> int:
    """``tidal run``: the daemon."""
    from autoscaler.runtime.daemon import run
    from autoscaler.runtime.kube.client import KubeConfigError

    try:
        return run(
            args.config,
            args.kubeconfig,
            dry_run=args.dry_run,
            once=args.once,
            context=args.context,
            log_format=LOG_FORMATS[args.log_format] if args.log_format else None,
            log_level=args.log_level,
        )
    except KubeConfigError as err:
        # Cluster access at start-up: one line, never a traceback.
        print(f"tidal: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a command builds what it reads and decides, and
    resumed as it was after.

    A 10,000-pod snapshot is millions of objects that all live until the command ends, and the collector would
    walk them again and again as they age: a third of the time of reading the snapshot and planning. What is
    built holds few reference cycles and the command is done in seconds, so nothing of note waits."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def cmd_plan(args: argparse.Namespace) -> int:
    """``tidal plan``: one plan for snapshot files, priced from catalog files; warnings on stderr."""
    with collector_paused():
        return _plan(args)


def _plan(args: argparse.Namespace) -> int:
    from autoscaler.cli.catalog_files import read_catalogs
    from autoscaler.cli.render import (
        plan_to_json,
        plan_to_table,
        plan_warnings,
        snapshot_footer,
        story_json,
        story_lines,
    )
    from autoscaler.cli.snapshot import read_snapshots
    from autoscaler.cloud import check_cloud
    from autoscaler.config.layers import load_layers
    from autoscaler.core.planning.planner import PlanInput, plan
    from autoscaler.core.reason_watch import tally, warning

    config, layers = load_layers(args.config or [])
    check_cloud(config.cloud)  # an unknown cloud is named as such, not as a catalog without its rows
    now = parse_time_arg(args.now) if args.now is not None else datetime.now(UTC).timestamp()
    loaded = read_snapshots(args.snapshot)
    # The pods' names only to check what --explain names: a set of 10,000 of them is not free.
    explain = _pods_to_explain(args.explain, {p.key for p in loaded.snapshot.pods}) if args.explain else []
    catalogs = read_catalogs(args.catalog, config)
    _say(f"configuration: {layers.describe()}; catalog: {catalogs.describe()}")
    for override in layers.overrides:
        _say(f"warning: {override.describe()}")
    result = plan(PlanInput(loaded.snapshot, catalogs.offerings, config, now, explain=explain))
    regexp = warning(tally(result.demand), "in the snapshot")
    warnings = [regexp] if regexp else []
    warnings += plan_warnings(result)
    for line in warnings:
        _say(f"warning: {line}")
    if args.output == "json":
        import orjson  # only here: the table goes out without it

        doc = plan_to_json(result)
        doc["skippedObjects"] = dict(sorted(loaded.skipped.items()))
        doc["duplicateObjects"] = dict(sorted(loaded.duplicates.items()))
        doc["warnings"] = [o.describe() for o in layers.overrides] + warnings
        if explain:
            doc["explain"] = [story_json(result.stories[key]) for key in explain]
        # orjson: a plan of thousands of launches, each with its fallbacks, is written ten times faster. Its
        # UTF-8 goes out as it is when stdout has a byte stream under it (not decoded, then encoded again).
        text = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
        out = getattr(sys.stdout, "buffer", None)
        if out is not None and (sys.stdout.encoding or "").lower().replace("-", "") == "utf8":
            sys.stdout.flush()
            out.write(text)
        else:
            sys.stdout.write(text.decode())
    elif explain:
        sys.stdout.write("\n\n".join("\n".join(story_lines(result.stories[key])) for key in explain) + "\n")
    else:
        sys.stdout.write(plan_to_table(result, config))
        sys.stdout.write(snapshot_footer(loaded))
    if args.process_ends:
        _end_process(0)
    return 0


def _end_process(code: int) -> NoReturn:
    """End the process once its output is out, with what it built still alive: a plan of 10,000 pods is
    millions of objects, which freeing one by one, then the modules, would take longer than writing the plan.
    Only for the command itself (``main()`` without arguments), whose process ends here anyway."""
    sys.stdout.flush()  # a closed pipe raises here, and main() stops quietly as for any other write
    sys.stderr.flush()
    os._exit(code)


def _pods_to_explain(wanted: Sequence[str], present: set[str]) -> list[str]:
    """The pods ``--explain`` names, each checked: namespace/name of a pod in the snapshot."""
    out = []
    for text in wanted:
        key = text.strip()
        if key.count("/") != 1 or not all(key.split("/")):
            raise UsageError(f"--explain: {text!r} is not namespace/name (e.g. default/infer-0)")
        if key not in present:
            name = key.split("/")[1]
            others = sorted(k for k in present if k.split("/", 1)[1] == name)
            hint = f" (pods of that name: {', '.join(others[:5])})" if others else ""
            raise UsageError(f"--explain: no pod {key} in the snapshot{hint}")
        out.append(key)
    return list(dict.fromkeys(out))


def bad_input() -> tuple[type[BaseException], ...]:
    """What a user can get wrong: one line on stderr and exit status 2. Any other exception is a bug in
    tidal and keeps its traceback. Imported only when an error is being handled."""
    from autoscaler.cli.snapshot import SnapshotError
    from autoscaler.cloud import ProviderError, ProviderNotFound
    from autoscaler.config.schema import ConfigError
    from autoscaler.core.fit import AnnotationError
    from autoscaler.core.quantity import QuantityError
    from autoscaler.runtime.catalog import CatalogError
    from autoscaler.runtime.kube.convert import ConversionError
    from autoscaler.sim.scenario import ScenarioError

    return (
        UsageError,
        ConfigError,
        SnapshotError,
        CatalogError,
        QuantityError,
        ConversionError,
        AnnotationError,
        ScenarioError,
        # Provider settings and cloud errors at start-up.
        ProviderNotFound,
        ProviderError,
    )


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "plan": cmd_plan,
    "simulate": cmd_simulate,
    "catalog": cmd_catalog,
    "run": cmd_run,
    "config": cmd_config,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tidal`` console script."""
    args_given = list(sys.argv[1:] if argv is None else argv)
    try:
        parser = build_parser()
        if not args_given:
            # A bare `tidal`, as a bare `kubectl`: what it can do, not an error.
            parser.print_help()
            return 0
        args = parser.parse_args(args_given)
        args.process_ends = argv is None  # the console script: nothing runs in this process after main()
        code = COMMANDS[args.command](args)
        sys.stdout.flush()  # here, not at exit, so a closed pipe is noticed where it can be handled
        return code
    except BrokenPipeError:
        # `tidal plan ... | head`: the reader has all it wanted. Point stdout at /dev/null so the interpreter's
        # own flush at exit does not fail again, and stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print("tidal: interrupted", file=sys.stderr)
        return 130
    except Exception as err:
        if isinstance(err, bad_input()):
            print(f"tidal: error: {err}", file=sys.stderr)
            return EXIT_BAD_INPUT
        raise


if __name__ == "__main__":
    sys.exit(main())
