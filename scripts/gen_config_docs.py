#!/usr/bin/env python3
"""Write docs/configuration.md, the configuration reference, from config/default.yaml.

    python scripts/gen_config_docs.py           # rewrite the file
    python scripts/gen_config_docs.py --check   # exit 1 when the file is not what this script writes

config/default.yaml holds every option with its default and a comment above it; this turns it into tables.
A top-level option whose default is a map of options (scaleDown, leaderElection) gets a section of its own.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "config" / "default.yaml"
OUTPUT = REPO / "docs" / "configuration.md"

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z][A-Za-z0-9]*):(?: (?P<value>.*))?$")


class SourceError(ValueError):
    """config/default.yaml is not in the shape this script documents; the message names the line."""


@dataclass
class Option:
    path: str
    default: str
    description: str
    children: list[Option] = field(default_factory=list)


def parse(text: str) -> list[Option]:
    """The options, in file order, each with the comment lines right above it (a blank line ends a comment,
    so the file's header paragraph belongs to no option)."""
    options: list[Option] = []
    comment: list[str] = []
    parent: Option | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            comment = []
            continue
        if stripped.startswith("#"):
            comment.append(stripped.removeprefix("#").strip())
            continue
        match = _KEY.match(line)
        if match is None:
            raise SourceError(f"{SOURCE.name}:{number}: not a 'key: value' line: {line!r}")
        if not comment:
            raise SourceError(f"{SOURCE.name}:{number}: {match['key']} has no comment above it")
        value = (match["value"] or "").strip()
        nested = len(match["indent"])
        if nested and parent is None:
            raise SourceError(f"{SOURCE.name}:{number}: {match['key']} is indented under no option")
        if nested:
            assert parent is not None
            option = Option(f"{parent.path}.{match['key']}", value, " ".join(comment))
            parent.children.append(option)
        else:
            option = Option(match["key"], value, " ".join(comment))
            options.append(option)
            parent = option if not value else None
        comment = []
    return options


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    if not text:
        return ""
    ticks = "``" if "`" in text else "`"
    pad = " " if ticks == "``" else ""
    return f"{ticks}{pad}{_cell(text)}{pad}{ticks}"


def _table(options: list[Option]) -> list[str]:
    rows = ["| Option | Default | Description |", "|---|---|---|"]
    for option in options:
        default = "see below" if option.children else _code(option.default)
        rows.append(f"| `{option.path}` | {default} | {_cell(option.description)} |")
    return rows


def render(text: str) -> str:
    """The Markdown reference for the default configuration ``text``."""
    options = parse(text)
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated from config/default.yaml by scripts/gen_config_docs.py: edit those, not this file. -->",
        "",
        "tidal reads YAML documents: `tidal run --config FILE` (in the cluster, the `config.yaml` key of",
        "the `tidal-config` ConfigMap, mounted at `/etc/tidal/config.yaml`), `tidal plan --config FILE`,",
        "`tidal simulate --config FILE` (over the scenario's own keys) and `tidal catalog --config FILE`. An",
        "option left out keeps the default below; an unknown option, a wrong type or a value out of range is",
        "rejected with one line naming the option and the value, all problems at once. The running daemon",
        "reloads the file when the ConfigMap changes and keeps the last good configuration when the new one is",
        "invalid (event `ConfigReloadFailed`, metric `tidal_config_last_reload_success`).",
        "",
        "## Several files",
        "",
        "Every subcommand takes `--config` more than once and lays the files over each other in the order",
        "given: an option in a later file replaces the earlier value, and the sections `scaleDown`,",
        "`leaderElection`, `kubeClient` and the provider sections (`simulated`, `aws`, `gcp`, `azure`) merge",
        "option by option. `tidal plan` and `tidal simulate` print the files they read on stderr (so",
        "`--output json` stays clean), and every subcommand names an option set in two files, once, at start",
        "(`tidal run` logs `configuration_key_set_twice`): the earlier value has no effect. The KAI preset",
        "(`config/examples/kai.yaml`) sets only `schedulerNames` and `pendingPodReasonRegexp`, so it can be laid",
        "over any configuration without overriding it.",
        "",
        "## Which pending pods count",
        "",
        "`pendingPodReasonRegexp` decides which unschedulable pods tidal launches for, by their `PodScheduled`",
        "message. The default counts every message except KAI Scheduler's queue holds (messages that start with",
        "`OverLimit`, `OverQuota` or `NonPreemptibleOverQuota`, or mention a quota): a new node would not let",
        "those pods run. To narrow it, use the KAI preset's allowlist of shortage phrases or write your own",
        'after the default\'s two look-aheads; to widen it, `".*"` counts every message (only for clusters',
        "without KAI). [kai.md](kai.md) explains both and how to check a change with `tidal plan`; a regexp",
        "that matches none of the unschedulable pods is reported by `tidal plan` and by the daemon (log, status",
        "ConfigMap, metric `tidal_pending_reason_regexp_pods`).",
        "",
        "Durations are written `500ms`, `30s`, `5m`, `1h30m` or as a bare number of seconds; quantities the",
        "Kubernetes way (`500m`, `2`, `6Gi`). `config/default.yaml` is this table as a file, and",
        "`config/examples/` has examples (`demo.yaml` is complete, `kai.yaml` is the preset for KAI Scheduler).",
        "`zones` must be zones of `region` where the cloud names a zone after its region (`us-east-1a`,",
        "`us-central1-a`, `eastus-1`): a zone of another region is an error.",
        "",
        "## Limits, queue budgets and fallbacks",
        "",
        "`clusterGPULimit`, `clusterCPULimit` and `maxNodes` count every node, launching ones included, and",
        "tidal never launches past them. `queueBudgets` does the same per KAI queue in USD per hour: a node",
        "opened for a queue's pods counts its whole price against the queue, and a pod whose queue it would",
        "take past its budget waits, unplaced with reason `queue Q would exceed its budget: ...` (filter",
        "`QueueBudget`). What a queue spends is the share of each node serving it that its pods' GPU requests",
        "are (cpu on nodes without GPU pods); [kai.md](kai.md) defines it and lists the `tidal_queue_*` metrics.",
        "`maxFallbackPriceRatio` bounds what a launch may fall back to when the cloud has no capacity for the",
        "chosen offering; `tidal plan` shows each launch's fallbacks with their prices and the cap.",
        "",
        "## Options",
        "",
        *_table(options),
    ]
    for option in options:
        if option.children:
            out += ["", f"## `{option.path}`", "", _cell(option.description), "", *_table(option.children)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file is out of date")
    args = parser.parse_args(argv)
    try:
        text = render(SOURCE.read_text(encoding="utf-8"))
    except SourceError as err:
        print(err, file=sys.stderr)
        return 2
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(
                f"{OUTPUT.relative_to(REPO)} is out of date: run python scripts/gen_config_docs.py",
                file=sys.stderr,
            )
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
