"""tidal's configuration: typed, validated, with every default taken from ``autoscaler/config/defaults.yaml``.

Configuration comes from a YAML file (``tidal plan --config``) or a ConfigMap. Keys are camelCase as in
Kubernetes and Luna; attributes are snake_case. The document's shape is the pydantic models of
``config.models``; what the rest of tidal reads is the frozen dataclasses of ``config.values``, built once per
load (the defaults without validating them again: ``config.defaults``). Validation
reports every problem at once, each naming its key path and the offending value, because a ConfigMap that fails
one error at a time wastes a deploy per typo.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from importlib import resources as package_files
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ValidationError

from autoscaler.config import schema as schema
from autoscaler.config.defaults import default_config
from autoscaler.config.fields import error_lines, field_values, keys_of
from autoscaler.config.models import SECTION_MODELS, VERBATIM, ConfigDocument
from autoscaler.config.schema import ConfigError, parse_duration, parse_selector_string
from autoscaler.config.sections import check_section, section_names
from autoscaler.config.values import (
    KEEP,
    RELEASE,
    WAIT,
    Config,
    DisruptionConfig,
    KubeClientConfig,
    LeaderElectionConfig,
    ReservationsConfig,
    ScaleDownConfig,
    SpotConfig,
)

__all__ = [
    "KEEP",
    "RELEASE",
    "WAIT",
    "Config",
    "ConfigError",
    "DisruptionConfig",
    "KubeClientConfig",
    "LeaderElectionConfig",
    "ReservationsConfig",
    "ScaleDownConfig",
    "SpotConfig",
    "config_from_configmap",
    "config_from_mapping",
    "default_config",
    "load_config",
    "parse_duration",
    "parse_selector_string",
    "provider_sections",
    "validated_defaults",
]


# The dataclass each section's model becomes: plain frozen values, cheap to read in the planner's loops.
_SECTIONS: dict[str, tuple[str, type]] = {
    "scaleDown": ("scale_down", ScaleDownConfig),
    "spot": ("spot", SpotConfig),
    "reservations": ("reservations", ReservationsConfig),
    "disruption": ("disruption", DisruptionConfig),
    "leaderElection": ("leader_election", LeaderElectionConfig),
    "kubeClient": ("kube_client", KubeClientConfig),
}
_OPTIONS = frozenset(keys_of(ConfigDocument))
_DEFAULTS_FILE = "defaults.yaml"
_CONFIGMAP_DOCUMENT_KEYS = ("config.yaml", "config.yml")


@functools.cache
def _defaults() -> Mapping[str, Any]:
    """The raw default document; never mutated, only read when merging."""
    source = f"autoscaler/{_DEFAULTS_FILE}"
    document = schema.load_yaml(
        package_files.files("autoscaler.config").joinpath(_DEFAULTS_FILE).read_text(), source, own=True
    )
    if not isinstance(document, Mapping):
        raise ConfigError(["the document must be a map of settings"], source)
    return document


# Clouds whose zone names carry their region (us-east-1a and us-east-1-bos-1a, us-central1-a, eastus-1): there a
# zone of another region is certainly a mistake, which would plan nodes in that zone at this region's prices.
# Names of any other form (an AWS zone ID, a bare Azure zone number) are left to the provider.
_ZONE_NAMES = {
    "aws": re.compile(r"(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+)(?:[a-z]|-[a-z0-9-]+)"),
    "gcp": re.compile(r"(?P<region>[a-z]+-[a-z]+\d+)-[a-z]"),
    "azure": re.compile(r"(?P<region>[a-z]+\d*)-\d"),
}


def _zones_in_region(values: Mapping[str, Any]) -> list[str]:
    pattern = _ZONE_NAMES.get(values.get("cloud") or "")
    region, zones = values.get("region"), values.get("zones")
    if pattern is None or not region or not zones:
        return []
    errors = []
    for zone in zones:
        named = pattern.fullmatch(zone)
        if named and named["region"] != region:
            errors.append(
                f"zones: {zone!r} is a zone of {named['region']}, not of region {region!r} "
                f"({values['cloud']} names a zone after its region)"
            )
    return errors


def _cross_checks(values: Mapping[str, Any]) -> list[str]:
    """Rules that tie two options together; each only when both options are valid on their own."""
    errors = []
    errors.extend(_zones_in_region(values))
    fmt = schema.format_seconds
    idle, longest = values.get("batch_idle_duration"), values.get("batch_max_duration")
    if idle is not None and longest is not None and idle > longest:
        errors.append(f"batchIdleDuration: {fmt(idle)} is longer than batchMaxDuration ({fmt(longest)})")
    election = values.get("leader_election")
    if election is not None:
        if election.renew_deadline >= election.lease_duration:
            errors.append(
                f"leaderElection.renewDeadline: {fmt(election.renew_deadline)} must be shorter than "
                f"leaderElection.leaseDuration ({fmt(election.lease_duration)})"
            )
        if election.retry_period >= election.renew_deadline:
            errors.append(
                f"leaderElection.retryPeriod: {fmt(election.retry_period)} must be shorter than "
                f"leaderElection.renewDeadline ({fmt(election.renew_deadline)})"
            )
    return errors


def provider_sections() -> tuple[str, ...]:
    """The top-level sections providers own: those registered, and those the defaults document."""
    return section_names(key for key in _defaults() if key not in _OPTIONS)


def _laid_over_defaults(data: Mapping[str, Any]) -> dict[str, Any]:
    """The document over the defaults; a section merges option by option, and an empty one (``scaleDown:``
    in YAML) means all its defaults. A section that is not a map is left for validation to report."""
    defaults = _defaults()
    merged = {**defaults, **data}
    for name in SECTION_MODELS:
        given = data.get(name)
        if given is None:
            merged[name] = defaults[name]
        elif isinstance(given, Mapping):
            merged[name] = {**defaults[name], **given}
    return merged


def _valid_parts(merged: Mapping[str, Any], failed: set[Any]) -> dict[str, Any]:
    """The options the cross-checks read that are valid on their own, when the document as a whole is not."""
    given = {key: merged[key] for key in _CROSS_CHECKED if key not in failed and key in merged}
    return field_values(ConfigDocument, given, "")[0]


_CROSS_CHECKED = ("cloud", "region", "zones", "batchIdleDuration", "batchMaxDuration", "leaderElection")


def config_from_mapping(data: Mapping[str, Any], *, source: str = "config") -> Config:
    """Validate a parsed configuration document laid over the defaults; ConfigError lists every problem."""
    if not isinstance(data, Mapping):
        raise ConfigError([f"the document must be a map of settings, not {schema.show(data)}"], source)
    defaults = _defaults()
    merged = _laid_over_defaults(data)
    errors: list[str] = []
    providers = {}
    sections = provider_sections()
    for name in sections:
        try:
            providers[name] = check_section(name, merged.pop(name, defaults.get(name)))
        except ConfigError as err:
            errors.extend(err.errors)
    try:
        document = ConfigDocument.model_validate(merged)
        values = {name: getattr(document, name) for name in ConfigDocument.model_fields}
    except ValidationError as err:
        errors.extend(error_lines(err, ConfigDocument, more_keys=lambda path: () if path else sections))
        values = _valid_parts(merged, {problem["loc"][0] for problem in err.errors()})
    for attr, dataclass_type in _SECTIONS.values():
        if isinstance(values.get(attr), BaseModel):
            values[attr] = dataclass_type(**dict(values[attr]))
    values["providers"] = MappingProxyType(providers)
    errors.extend(_cross_checks(values))
    if errors:
        # Report in the order the user wrote the keys (within a key, its unknown keys first), so the message
        # reads alongside the file.
        written = {str(key): i for i, key in enumerate(data)}

        def order(error: str) -> tuple[int, bool]:
            top = re.split(r"[.\[:]", error, maxsplit=1)[0]
            return written.get(top, len(written)), ": unknown key" not in error

        errors.sort(key=order)
        raise ConfigError(errors, source)
    return Config(**values)


def validated_defaults() -> Config:
    """The defaults as :func:`config_from_mapping` makes them of ``defaults.yaml``: what
    ``config.built_defaults`` was written from, and must still equal (a test holds them so)."""
    return config_from_mapping({}, source=f"autoscaler/{_DEFAULTS_FILE}")


def load_config(path: str | os.PathLike[str] | None) -> Config:
    """Read a YAML configuration file (None means the defaults); an empty file is the defaults too."""
    if path is None:
        return default_config()
    source = os.fspath(path)
    return config_from_mapping(read_document(source), source=source)


def read_document(path: str) -> Mapping[str, Any]:
    """A configuration file's settings as written (an empty file has none), not yet validated."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as err:
        raise ConfigError([f"cannot read the file: {err.strerror or err}"], path) from None
    except UnicodeDecodeError:
        raise ConfigError(["is not UTF-8 text"], path) from None
    document = schema.load_yaml(text, path)
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise ConfigError([f"the document must be a map of settings, not {schema.show(document)}"], path)
    return document


def config_from_configmap(data: Mapping[str, str], *, source: str = "configmap") -> Config:
    """Build the configuration from a ConfigMap's ``data``.

    Either one entry ``config.yaml`` (or ``config.yml``) holds the whole YAML document, or, Luna style, every
    entry is one top-level option whose value is that option's YAML (``{"clusterGPULimit": "16"}``).
    """
    document_keys = [k for k in _CONFIGMAP_DOCUMENT_KEYS if k in data]
    if document_keys:
        others = sorted(k for k in data if k != document_keys[0])
        if others:
            raise ConfigError(
                [f"{document_keys[0]} holds the whole configuration; move {', '.join(others)} into it"],
                source,
            )
        document = schema.load_yaml(data[document_keys[0]], f"{source}/{document_keys[0]}")
        return config_from_mapping({} if document is None else document, source=source)
    parsed: dict[str, Any] = {}
    errors: list[str] = []
    for key, value in data.items():
        if not isinstance(value, str) or key in VERBATIM:
            parsed[key] = value
            continue
        try:
            parsed[key] = schema.load_yaml(value, key)
        except ConfigError as err:
            where = err.source.removeprefix(key).replace(":", " line ", 1).replace(":", " column ", 1)
            errors.append(f"{key}: invalid YAML{where}: {'; '.join(err.errors)}")
    try:
        config = config_from_mapping(parsed, source=source)
    except ConfigError as err:
        errors.extend(err.errors)
    if errors:
        raise ConfigError(errors, source)
    return config
