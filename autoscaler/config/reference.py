"""What the configuration documents about itself: its JSON Schema and its Markdown reference.

Both are built from the models of :mod:`autoscaler.config.models` (which options exist, where, of which type,
and what each does: its field's description) and the providers' registered sections, with each option's
default taken from ``autoscaler/config/defaults.yaml``, the file users copy. That file's comments repeat the
models' descriptions, and a test holds them equal, so the text has one source. ``tidal config schema`` prints the schema (``deploy/config.schema.json`` is it, for editors
validating the ConfigMap); ``tidal config docs`` prints docs/configuration.md.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources as package_files
from typing import Any

import yaml
from pydantic import BaseModel

from autoscaler.config.fields import keys_of
from autoscaler.config.models import SECTION_MODELS, ConfigDocument
from autoscaler.config.options import provider_sections
from autoscaler.config.sections import section_model

__all__ = ["Option", "SourceError", "description", "json_schema", "markdown", "options", "parse", "render"]

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z][A-Za-z0-9]*):(?: (?P<value>.*))?$")


class SourceError(ValueError):
    """The default file is not in the shape the reference is made from; the message names the line."""


@dataclass
class Option:
    """One option: its key path, its default as written in YAML, what it does, and its own options."""

    path: str
    default: str
    description: str
    children: list[Option] = field(default_factory=list)


def parse(text: str, name: str = "default.yaml") -> list[Option]:
    """The options of a default file, in order, each with the comment lines right above it (a blank line ends
    a comment, so the file's header paragraph belongs to no option)."""
    found: list[Option] = []
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
            raise SourceError(f"{name}:{number}: not a 'key: value' line: {line!r}")
        if not comment:
            raise SourceError(f"{name}:{number}: {match['key']} has no comment above it")
        value = (match["value"] or "").strip()
        if match["indent"] and parent is None:
            raise SourceError(f"{name}:{number}: {match['key']} is indented under no option")
        if match["indent"]:
            assert parent is not None
            parent.children.append(Option(f"{parent.path}.{match['key']}", value, " ".join(comment)))
        else:
            option = Option(match["key"], value, " ".join(comment))
            found.append(option)
            parent = option if not value else None
        comment = []
    return found


def _documented() -> dict[str, Option]:
    text = package_files.files("autoscaler.config").joinpath("defaults.yaml").read_text(encoding="utf-8")
    return {o.path: o for top in parse(text) for o in (top, *top.children)}


def _model_options(model: type[BaseModel], prefix: str) -> list[Option]:
    """A provider's own model: its fields' descriptions and defaults are the documentation."""
    return [
        Option(
            f"{prefix}.{info.alias or name}",
            "required" if info.is_required() else json.dumps(info.default, default=str),
            info.description or "",
        )
        for name, info in model.model_fields.items()
    ]


def description(model: type[BaseModel], key: str) -> str:
    """What the option ``key`` of ``model`` does, as its field says."""
    fields = {info.alias or name: info for name, info in model.model_fields.items()}
    return fields[key].description or ""


def options() -> list[Option]:
    """Every option the models take, in their order, described by the models, with the defaults of the default
    file; provider sections last, each with its own options when its provider registered a model."""
    documented = _documented()

    def option(model: type[BaseModel], key: str, path: str) -> Option:
        if path not in documented:
            raise SourceError(f"defaults.yaml: {path} has no default and comment")
        return Option(path, documented[path].default, description(model, key))

    out = []
    for key in keys_of(ConfigDocument):
        top = option(ConfigDocument, key, key)
        if key in SECTION_MODELS:
            top.children = [
                option(SECTION_MODELS[key], k, f"{key}.{k}") for k in keys_of(SECTION_MODELS[key])
            ]
        out.append(top)
    registered = provider_sections()
    for name in [n for n in documented if n in registered] + [n for n in registered if n not in documented]:
        model = section_model(name)
        described = documented.get(name) or Option(name, "{}", (model.__doc__ or "").strip() if model else "")
        children = _model_options(model, name) if model else []
        out.append(Option(name, described.default, described.description, children))
    return out


# --- Markdown -----------------------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    if not text:
        return ""
    ticks = "``" if "`" in text else "`"
    pad = " " if ticks == "``" else ""
    return f"{ticks}{pad}{_cell(text)}{pad}{ticks}"


def _table(rows: list[Option]) -> list[str]:
    out = ["| Option | Default | Description |", "|---|---|---|"]
    for option in rows:
        default = "see below" if option.children else _code(option.default)
        out.append(f"| `{option.path}` | {default} | {_cell(option.description)} |")
    return out


def render(rows: list[Option]) -> str:
    """The Markdown reference of ``rows``: one table of every option, a section for each map of options."""
    out = [*INTRO, "", "## Options", "", *_table(rows)]
    for option in rows:
        if option.children:
            out += ["", f"## `{option.path}`", "", _cell(option.description), "", *_table(option.children)]
    return "\n".join(out) + "\n"


def markdown() -> str:
    """docs/configuration.md: the reference of every option the models take."""
    return render(options())


# --- JSON Schema --------------------------------------------------------------------------------------------


def _describe(node: dict[str, Any], option: Option | None, *, text: bool = False) -> None:
    """Give ``node`` the default of ``option`` (and, with ``text``, its description: a provider's section,
    which no model of tidal's describes)."""
    if option is None:
        return
    if text:
        node["description"] = option.description
    if option.default and not option.children:
        node["default"] = yaml.safe_load(option.default)


def _properties(node: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref", "")
    target = defs[ref.rsplit("/", 1)[-1]] if ref else node
    props: dict[str, Any] = target.get("properties", {})
    return props


def _provider_schema(name: str, defs: dict[str, Any]) -> dict[str, Any]:
    """A provider's section: its registered model's schema (its definitions kept under the provider's name),
    else any map, which the provider checks when it starts."""
    model = section_model(name, own=True)
    if model is None:
        return {"type": ["object", "null"]}
    own = model.model_json_schema(by_alias=True, ref_template=f"#/$defs/{name}.{{model}}")
    defs.update({f"{name}.{k}": v for k, v in own.pop("$defs", {}).items()})
    own.pop("title", None)
    return own


def _untitled(*models: dict[str, Any]) -> None:
    """Drop the titles pydantic makes up from attribute names ("Nodemaxlifetime"): the keys say it better."""
    for model in models:
        for node in model.get("properties", {}).values():
            node.pop("title", None)


def json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of a whole configuration document, provider sections included."""
    documented = _documented()
    schema = copy.deepcopy(ConfigDocument.model_json_schema(by_alias=True))
    defs: dict[str, Any] = schema.setdefault("$defs", {})
    for key, node in schema["properties"].items():
        _describe(node, documented.get(key))
        for sub, sub_node in _properties(node, defs).items():
            _describe(sub_node, documented.get(f"{key}.{sub}"))
    # Every option of tidal's own has a default; only a provider's model may require something.
    for model_schema in (schema, *defs.values()):
        model_schema.pop("required", None)
    for name in provider_sections():
        schema["properties"][name] = _provider_schema(name, defs)
        _describe(schema["properties"][name], documented.get(name), text=True)
    _untitled(schema, *defs.values(), *schema["properties"].values())
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "tidal configuration",
        "description": "A tidal configuration document: the config.yaml of its ConfigMap (docs/configuration.md).",
        **{k: v for k, v in schema.items() if k not in ("title", "description")},
    }


# --- the reference's opening, before its tables -------------------------------------------------------------

INTRO = (
    "# Configuration reference",
    "",
    "<!-- Generated by `tidal config docs` from autoscaler/config/models.py and the defaults of",
    "     autoscaler/config/defaults.yaml (config/default.yaml): edit those, not this file. -->",
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
    "`tidal config schema` prints the JSON Schema of the whole document, provider sections included, and",
    "`deploy/config.schema.json` is that schema: a `config.yaml` that names it on its first line",
    "(`# yaml-language-server: $schema=...`) gets a misspelt key or a wrong type flagged as you type by an",
    "editor with the YAML language server. The Helm chart's `values.schema.json` holds the same schema for",
    "its `config` value, so `helm install` refuses what tidal would. A provider installed as a plugin (a",
    "`tidal.providers` entry point) whose class has a `settings_model` has its section checked by that model",
    "when the configuration loads, and described in the schema and below.",
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
)
