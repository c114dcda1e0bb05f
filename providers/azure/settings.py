"""The ``azure:`` configuration section, checked once at start.

Every problem is reported at once, each as ``azure.<key>: …`` naming the value, in one ConfigError whose
message is a single line (the CLI and the daemon print it as is).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from autoscaler.config import schema as schema
from autoscaler.config.fields import Section, checked, field_values
from autoscaler.config.options import Config, ConfigError
from autoscaler.core.offering import Offering
from autoscaler.runtime.catalog import CatalogError, read_catalog_csv

__all__ = ["SECTION", "AzureSection", "AzureSettings", "ProviderConfigError", "parse_settings"]

SECTION = "azure"
DEFAULT_ENDPOINT = "https://management.azure.com"
DEFAULT_PRICES_ENDPOINT = "https://prices.azure.com"
DEFAULT_PRICE_REFRESH = 3600.0
DEFAULT_OPERATION_WAIT = 2.0
MAX_OPERATION_WAIT = 30.0

_GUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_RESOURCE_GROUP = r"[-\w._()]{0,89}[-\w_()]"
_SCALE_SET = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
_VM_SIZE = r"Standard_[A-Za-z0-9_]+"
_REGION = r"[a-z][a-z0-9]+"
_RESERVATION_GROUP = r"[A-Za-z0-9][A-Za-z0-9._-]{0,78}[A-Za-z0-9_]|[A-Za-z0-9]"


class ProviderConfigError(ConfigError):
    """A bad ``azure:`` section (or top-level setting the Azure provider depends on); one line."""


@dataclass(frozen=True, slots=True)
class AzureSettings:
    """The validated ``azure:`` section; durations in seconds."""

    subscription_id: str
    resource_group: str
    scale_sets: Mapping[str, str] = field(default_factory=dict)
    spot_scale_sets: Mapping[str, str] = field(default_factory=dict)
    template_scale_set: str | None = None
    endpoint: str = DEFAULT_ENDPOINT
    prices_endpoint: str = DEFAULT_PRICES_ENDPOINT
    catalog_fallback: Path | None = None
    price_refresh_interval: float = DEFAULT_PRICE_REFRESH
    operation_wait: float = DEFAULT_OPERATION_WAIT
    fallback_offerings: tuple[Offering, ...] = ()
    # Capacity reservation groups (of the node resource group) tidal puts VMs into.
    capacity_reservation_groups: tuple[str, ...] = ()
    # What launching needs and the section lacks (built only to list offerings): launch() refuses with it.
    launch_problems: tuple[str, ...] = ()

    @property
    def every_size(self) -> bool:
        """Built to list offerings without a scale set: every VM size of the region is offered."""
        return not (self.scale_sets or self.spot_scale_sets or self.template_scale_set)

    def scale_set_names(self) -> list[str]:
        """Every configured scale set name, template included, each once, in a stable order."""
        names = [*self.scale_sets.values(), *self.spot_scale_sets.values()]
        if self.template_scale_set:
            names.append(self.template_scale_set)
        return list(dict.fromkeys(names))


def _https_url(value: Any, path: str) -> str:
    text: str = schema.text()(value, path)
    parts = urlsplit(text)
    if parts.scheme != "https" or not parts.netloc:
        schema.fail(
            path, f"{schema.show(value)} is not an https:// URL (Azure bearer tokens are only sent over TLS)"
        )
    return text.rstrip("/")


def _size_map(value: Any, path: str) -> Mapping[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        schema.fail(path, f"{schema.show(value)} is not a map of VM size to scale set name")
    errors: list[str] = []
    out: dict[str, str] = {}
    for size, name in value.items():
        if not isinstance(size, str) or not re.fullmatch(_VM_SIZE, size):
            errors.append(
                f"{path}: {schema.show(size)} is not an Azure VM size (e.g. Standard_NC24ads_A100_v4)"
            )
            continue
        if not isinstance(name, str) or not re.fullmatch(_SCALE_SET, name):
            errors.append(f"{path}.{size}: {schema.show(name)} is not a scale set name")
            continue
        out[size] = name
    if errors:
        raise ConfigError(errors)
    return out


def _operation_wait(value: Any, path: str) -> float:
    seconds: float = schema.duration(positive=False)(value, path)
    if seconds > MAX_OPERATION_WAIT:
        schema.fail(
            path,
            f"{schema.show(value)} is longer than {int(MAX_OPERATION_WAIT)}s: a launch must not hold the "
            "reconcile loop; operations still running are followed without waiting",
        )
    return seconds


_SIZE_MAP = {"type": ["object", "null"], "additionalProperties": {"type": "string"}}
_TEXT = {"type": ["string", "null"]}
_DURATION = {"type": ["string", "number", "null"]}


class AzureSection(Section):
    """The keys of the ``azure:`` section (null is the same as absent); ``parse_settings`` adds what ties them
    to each other and to the rest of the configuration."""

    subscription_id: Annotated[
        str | None, checked(schema.text(pattern=_GUID, rule="a subscription id (a GUID)"), _TEXT)
    ] = None
    resource_group: Annotated[
        str | None,
        checked(
            schema.text(
                pattern=_RESOURCE_GROUP, rule="a resource group name (the AKS node resource group, MC_…)"
            ),
            _TEXT,
        ),
    ] = None
    scale_sets: Annotated[Mapping[str, str] | None, checked(_size_map, _SIZE_MAP)] = None
    spot_scale_sets: Annotated[Mapping[str, str] | None, checked(_size_map, _SIZE_MAP)] = None
    template_scale_set: Annotated[
        str | None, checked(schema.text(pattern=_SCALE_SET, rule="a scale set name"), _TEXT)
    ] = None
    endpoint: Annotated[str | None, checked(_https_url, _TEXT)] = None
    prices_endpoint: Annotated[str | None, checked(_https_url, _TEXT)] = None
    catalog_fallback: Annotated[
        Path | None, checked(lambda v, p: Path(os.path.expanduser(schema.text()(v, p))), _TEXT)
    ] = None
    price_refresh_interval: Annotated[float | None, checked(schema.duration(), _DURATION)] = None
    operation_wait: Annotated[float | None, checked(_operation_wait, _DURATION)] = None
    capacity_reservation_groups: Annotated[
        tuple[str, ...] | None,
        checked(
            schema.string_list(
                item=schema.text(pattern=_RESERVATION_GROUP, rule="a capacity reservation group name"),
                unique=True,
            ),
            {"type": ["array", "null"], "items": {"type": "string"}},
        ),
    ] = None


def _top_level(config: Config) -> list[str]:
    """The top-level settings the Azure provider reads: an Azure region and AKS zone names."""
    errors = []
    if not re.fullmatch(_REGION, config.region):
        errors.append(f"region: {config.region!r} is not an Azure region (e.g. eastus)")
        return errors
    for zone in config.zones:
        if not re.fullmatch(rf"{re.escape(config.region)}-\d", zone):
            errors.append(
                f"zones: {zone!r} is not a zone of {config.region} as AKS names it (e.g. {config.region}-1)"
            )
    return errors


def _fallback(path: Path, config: Config) -> tuple[Offering, ...]:
    try:
        rows = read_catalog_csv(path, cloud="azure", region=config.region, max_pods=config.max_pods_per_node)
    except CatalogError as err:
        schema.fail(f"{SECTION}.catalogFallback", str(err))
    if not rows:
        schema.fail(f"{SECTION}.catalogFallback", f"'{path}' has no rows for azure {config.region}")
    return tuple(rows)


def parse_settings(raw: Mapping[str, Any], config: Config, *, launching: bool = True) -> AzureSettings:
    """Validate the raw ``azure:`` map against ``config``; ProviderConfigError lists every problem.

    ``launching=False`` is for listing offerings only (``tidal catalog``): the resource group and scale sets
    may be missing (every VM size of the region is listed then), and the subscription may come from the
    environment (``AZURE_SUBSCRIPTION_ID``); what launching needs is kept in ``launch_problems``."""
    values, unknown, bad = field_values(AzureSection, raw, SECTION)
    errors = unknown + _top_level(config) + bad
    missing: list[str] = []
    if raw.get("subscriptionId") is None:
        subscription = "" if launching else os.environ.get("AZURE_SUBSCRIPTION_ID", "")
        if subscription:
            values["subscription_id"] = subscription
        else:
            errors.append(
                f"{SECTION}.subscriptionId: required"
                + ("" if launching else " (or set AZURE_SUBSCRIPTION_ID)")
            )
    if raw.get("resourceGroup") is None:
        missing.append(f"{SECTION}.resourceGroup: required")
        values["resource_group"] = ""
    if not any(raw.get(k) for k in ("scaleSets", "spotScaleSets", "templateScaleSet")):
        missing.append(
            f"{SECTION}.scaleSets: required unless spotScaleSets or templateScaleSet is set "
            "(the node-pool scale set tidal grows for each VM size)"
        )
    if launching:
        errors.extend(missing)
        missing = []
    if "catalog_fallback" in values and not [e for e in errors if e.startswith("region:")]:
        try:
            values["fallback_offerings"] = _fallback(values["catalog_fallback"], config)
        except ConfigError as err:
            errors.extend(err.errors)
    if errors:
        raise ProviderConfigError(errors)
    return AzureSettings(**values, launch_problems=tuple(missing))
