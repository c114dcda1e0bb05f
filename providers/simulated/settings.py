"""The ``simulated:`` configuration section and the catalog it points at, checked once at start.

Every problem a user can cause here (unknown key, bad value, unreadable catalog, a capacity failure that
matches nothing) is reported as one line naming ``simulated.<key>`` and the value, never as a traceback.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, ValidationError

from autoscaler.config import schema as schema
from autoscaler.config.fields import Section, checked, error_lines, field_values
from autoscaler.config.options import Config, ConfigError, parse_duration
from autoscaler.core.model import CAPACITY_TYPES, ON_DEMAND
from autoscaler.core.offering import Offering, ReservationKind
from autoscaler.runtime.catalog import CatalogError, read_catalog_csv

__all__ = [
    "CapacityRule",
    "Catalog",
    "ProviderConfigError",
    "SimReservation",
    "SimulatedSection",
    "SimulatedSettings",
    "load_catalog",
    "parse_settings",
]

SECTION = "simulated"
_KINDS = tuple(k.value for k in ReservationKind)


class ProviderConfigError(ConfigError):
    """A bad ``simulated:`` section; a ValueError (via ConfigError) whose message is one line."""


@dataclass(frozen=True, slots=True)
class CapacityRule:
    """Offerings matching the pattern (None = any) have capacity or not; later rules override earlier ones."""

    instance_type: str | None = None
    zone: str | None = None
    capacity_type: str | None = None
    has_capacity: bool = False

    def matches(self, offering: Offering) -> bool:
        """Whether the pattern selects ``offering``."""
        return (
            (self.instance_type is None or self.instance_type == offering.instance_type)
            and (self.zone is None or self.zone == offering.zone)
            and (self.capacity_type is None or self.capacity_type == offering.capacity_type)
        )

    def covers(self, other: CapacityRule) -> bool:
        """Whether every offering ``other`` selects is also selected by this rule."""
        return all(
            mine is None or mine == theirs
            for mine, theirs in (
                (self.instance_type, other.instance_type),
                (self.zone, other.zone),
                (self.capacity_type, other.capacity_type),
            )
        )

    def describe(self) -> str:
        """``g5.xlarge/*/spot`` style pattern for logs."""
        return "/".join(v or "*" for v in (self.instance_type, self.zone, self.capacity_type))

    def to_json(self) -> dict[str, Any]:
        """The JSON form kept in the state file."""
        return {
            "instanceType": self.instance_type,
            "zone": self.zone,
            "capacityType": self.capacity_type,
            "hasCapacity": self.has_capacity,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CapacityRule:
        """Inverse of :meth:`to_json`."""
        return cls(
            data.get("instanceType"), data.get("zone"), data.get("capacityType"), bool(data["hasCapacity"])
        )


@dataclass(frozen=True, slots=True)
class SimReservation:
    """Capacity bought ahead in the simulated cloud: ``count`` instances of one type in one zone; a Capacity
    Block between ``start`` and ``end`` (clock seconds), whose instances the cloud terminates from 30 minutes
    before its end, as EC2 does."""

    id: str
    instance_type: str
    zone: str
    count: int
    kind: ReservationKind = ReservationKind.OPEN
    start: float | None = None
    end: float | None = None


@dataclass(frozen=True, slots=True)
class SimulatedSettings:
    """The validated ``simulated:`` section; durations in seconds."""

    catalog: Path
    catalog_cloud: str | None = None
    catalog_region: str | None = None
    register_nodes: bool = True
    launch_delay: float = 2.0
    registration_delay: float = 3.0
    gpu_ready_delay: float = 5.0
    capacity_failures: tuple[CapacityRule, ...] = ()
    quota_gpus: int | None = None
    state_file: Path | None = None
    # Spot interruptions: each running spot instance gets a notice after an exponentially distributed time
    # (this many per instance-hour on average; 0 = never) and is reclaimed ``spot_interruption_notice`` later.
    spot_interruption_rate: float = 0.0
    spot_interruption_notice: float = 120.0
    reservations: tuple[SimReservation, ...] = ()


@dataclass(frozen=True, slots=True)
class Catalog:
    """The offerings this simulated cloud sells: one cloud, one region, the configured zones."""

    cloud: str
    region: str
    zones: tuple[str, ...]
    offerings: tuple[Offering, ...]


def _duration(value: Any, path: str) -> float:
    return parse_duration(value, field=path)


def _path(value: Any, path: str) -> Path:
    return Path(os.path.expanduser(schema.text()(value, path)))


def _time(value: Any, path: str) -> float:
    """Clock seconds: a number, or an RFC 3339 time."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    text = schema.text()(value, path)
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        schema.fail(path, f"{schema.show(value)} is not a time (clock seconds or RFC 3339)")


def _maybe(convert: Callable[[Any, str], Any], json_schema: Mapping[str, Any]) -> checked:
    """An entry's key: null is as if it were left out."""
    return checked(schema.optional(convert), json_schema)


_STRING = {"type": "string"}
_CLOCK = {"type": ["number", "string"]}


class CapacityFailureModel(Section):
    """Offerings the simulated cloud has no capacity for: those matching every key given."""

    instance_type: Annotated[str | None, _maybe(schema.text(), _STRING)] = Field(
        default=None, description="Instance type (any when left out)."
    )
    zone: Annotated[str | None, _maybe(schema.text(), _STRING)] = Field(
        default=None, description="Zone (any when left out)."
    )
    capacity_type: Annotated[
        str | None, _maybe(schema.choice(CAPACITY_TYPES), {"enum": list(CAPACITY_TYPES)})
    ] = Field(default=None, description="Capacity type (any when left out).")


class ReservationModel(Section):
    """Capacity bought ahead in the simulated cloud."""

    id: Annotated[
        str | None,
        _maybe(
            schema.text(pattern=r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", rule="a reservation id (a label value)"),
            _STRING,
        ),
    ] = Field(default=None, description="The reservation's id (required).")
    instance_type: Annotated[str | None, _maybe(schema.text(), _STRING)] = Field(
        default=None, description="Instance type reserved (required)."
    )
    zone: Annotated[str | None, _maybe(schema.text(), _STRING)] = Field(
        default=None, description="Zone reserved in (required)."
    )
    count: Annotated[int | None, _maybe(schema.integer(minimum=1), {"type": "integer", "minimum": 1})] = (
        Field(default=None, description="Instances reserved (required).")
    )
    kind: Annotated[str | None, _maybe(schema.choice(_KINDS), {"enum": list(_KINDS)})] = Field(
        default=None, description="open (the default), targeted or capacity-block."
    )
    start: Annotated[float | None, _maybe(_time, _CLOCK)] = Field(
        default=None, description="When a Capacity Block starts: clock seconds or an RFC 3339 time."
    )
    end: Annotated[float | None, _maybe(_time, _CLOCK)] = Field(
        default=None, description="When a Capacity Block ends: clock seconds or an RFC 3339 time."
    )


def _entries(
    model: type[Section], value: Any, path: str, keys: str
) -> list[tuple[str, Any, Section | None, list[str]]]:
    """Each entry of a list of ``model`` maps: where it is, as given, as checked (None when it is not valid),
    and the lines for its problems."""
    if not isinstance(value, Sequence) or isinstance(value, str):
        schema.fail(path, f"{schema.show(value)} is not a list of {{{keys}}} maps")
    out: list[tuple[str, Any, Section | None, list[str]]] = []
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        try:
            out.append((where, item, model.model_validate(item), []))
        except ValidationError as err:
            out.append((where, item, None, error_lines(err, model, prefix=where)))
    return out


def _capacity_failures(value: Any, path: str) -> tuple[CapacityRule, ...]:
    if value is None:
        return ()
    entries = _entries(CapacityFailureModel, value, path, "instanceType, zone, capacityType")
    errors = [line for *_, lines in entries for line in lines]
    if errors:
        raise ConfigError(errors)
    rules = [e for _, _, e, _ in entries if isinstance(e, CapacityFailureModel)]
    return tuple(CapacityRule(r.instance_type, r.zone, r.capacity_type) for r in rules)


def _reservations(value: Any, path: str) -> tuple[SimReservation, ...]:
    out, errors = [], []
    for where, item, entry, lines in _entries(ReservationModel, value, path, "id, instanceType, zone, count"):
        errors.extend(lines)
        if not isinstance(item, Mapping):
            continue
        missing = [k for k in ("id", "instanceType", "zone", "count") if item.get(k) is None]
        if missing:
            errors.append(f"{where}: {', '.join(missing)} required")
            continue
        if not isinstance(entry, ReservationModel):
            continue
        kind = ReservationKind(entry.kind or ReservationKind.OPEN.value)
        if kind == ReservationKind.CAPACITY_BLOCK and (entry.start is None or entry.end is None):
            errors.append(f"{where}: a capacity-block needs start and end")
            continue
        if entry.start is not None and entry.end is not None and entry.end <= entry.start:
            errors.append(f"{where}.end: not after start")
            continue
        assert entry.id and entry.instance_type and entry.zone and entry.count  # none is missing (above)
        out.append(
            SimReservation(
                entry.id, entry.instance_type, entry.zone, entry.count, kind, entry.start, entry.end
            )
        )
    ids = [r.id for r in out]
    errors += [f"{path}: id {rid!r} is listed twice" for rid in sorted({x for x in ids if ids.count(x) > 1})]
    if errors:
        raise ConfigError(errors)
    return tuple(out)


_TEXT = {"type": ["string", "null"]}
_DURATION = {"type": ["string", "number"]}


def _list_of(model: type[Section]) -> dict[str, Any]:
    return {"type": ["array", "null"], "items": model.model_json_schema(by_alias=True)}


class SimulatedSection(Section):
    """The keys of the ``simulated:`` section; ``parse_settings`` adds that a catalog is required."""

    catalog: Annotated[Path | None, checked(_path, {"type": "string"})] = None
    catalog_cloud: Annotated[str | None, checked(schema.optional(schema.text()), _TEXT)] = None
    catalog_region: Annotated[str | None, checked(schema.optional(schema.text()), _TEXT)] = None
    register_nodes: Annotated[bool | None, checked(schema.boolean, {"type": "boolean"})] = None
    launch_delay: Annotated[float | None, checked(_duration, _DURATION)] = None
    registration_delay: Annotated[float | None, checked(_duration, _DURATION)] = None
    gpu_ready_delay: Annotated[float | None, checked(_duration, _DURATION)] = None
    capacity_failures: Annotated[
        tuple[CapacityRule, ...] | None, checked(_capacity_failures, _list_of(CapacityFailureModel))
    ] = None
    quota_gpus: Annotated[
        int | None,
        checked(schema.optional(schema.integer(minimum=0)), {"type": ["integer", "null"], "minimum": 0}),
        Field(alias="quotaGPUs"),
    ] = None
    state_file: Annotated[Path | None, checked(schema.optional(_path), _TEXT)] = None
    spot_interruption_rate: Annotated[
        float | None, checked(schema.number(minimum=0), {"type": "number", "minimum": 0})
    ] = None
    spot_interruption_notice: Annotated[float | None, checked(schema.duration(positive=False), _DURATION)] = (
        None
    )
    reservations: Annotated[
        tuple[SimReservation, ...] | None, checked(_reservations, _list_of(ReservationModel))
    ] = None


def parse_settings(raw: Mapping[str, Any]) -> SimulatedSettings:
    """Validate the raw ``simulated:`` map; raise :class:`ProviderConfigError` listing every problem."""
    values, errors, bad = field_values(SimulatedSection, raw, SECTION, null_is_absent=False)
    errors += bad
    if "catalog" not in raw:
        errors.append(f"{SECTION}.catalog: required (a CSV file of instance types and prices)")
    if errors:
        raise ProviderConfigError(errors)
    return SimulatedSettings(**values)


def _pick(wanted: str | None, fallback: str, present: Sequence[str], key: str, what: str, source: str) -> str:
    """The explicit choice, else the configured one when present, else the only one in the file."""
    listed = ", ".join(present) or "none"
    if wanted is not None:
        if wanted not in present:
            schema.fail(f"{SECTION}.{key}", f"{wanted!r} has no rows in {source} ({what}s there: {listed})")
        return wanted
    if fallback in present:
        return fallback
    if len(present) == 1:
        return present[0]
    schema.fail(
        f"{SECTION}.{key}",
        f"not set, and {source} has rows of several {what}s ({listed}) and none is {fallback!r}",
    )


def default_zones(cloud: str, region: str) -> tuple[str, ...]:
    """Three zones named as the cloud names them: ``us-east-1a``, ``us-central1-a``, ``eastus-1``."""
    if cloud == "gcp":
        return tuple(f"{region}-{z}" for z in "abc")
    if cloud == "azure":
        return tuple(f"{region}-{z}" for z in "123")
    return tuple(f"{region}{z}" for z in "abc")


def _read(settings: SimulatedSettings, config: Config) -> Catalog:
    source = str(settings.catalog)
    pairs: dict[str, list[str]] = {}
    try:
        with settings.catalog.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                cloud, region = (row.get("cloud") or "").strip(), (row.get("region") or "").strip()
                regions = pairs.setdefault(cloud, [])
                if region not in regions:
                    regions.append(region)
    except OSError as err:
        schema.fail(f"{SECTION}.catalog", f"{source!r}: {err.strerror or err}")
    except (UnicodeDecodeError, csv.Error) as err:
        schema.fail(f"{SECTION}.catalog", f"{source!r} is not a CSV file ({err})")
    cloud = _pick(settings.catalog_cloud, config.cloud, sorted(pairs), "catalogCloud", "cloud", source)
    region = _pick(
        settings.catalog_region, config.region, sorted(pairs[cloud]), "catalogRegion", "region", source
    )
    zones = tuple(config.zones) or default_zones(cloud, region)
    try:
        offerings = read_catalog_csv(
            settings.catalog, cloud=cloud, region=region, zones=zones, max_pods=config.max_pods_per_node
        )
    except CatalogError as err:
        schema.fail(f"{SECTION}.catalog", str(err))
    if config.zones:  # rows that name a zone outside the configured ones are not for sale here
        offerings = [o for o in offerings if o.zone in zones]
    zones = tuple(dict.fromkeys([*zones, *(o.zone for o in offerings)]))
    if not offerings:
        schema.fail(
            f"{SECTION}.catalog",
            f"{source!r} has no offerings for {cloud} {region} in zones {', '.join(zones)}",
        )
    for i, r in enumerate(settings.reservations):
        if not any(
            (o.instance_type, o.zone, o.capacity_type) == (r.instance_type, r.zone, ON_DEMAND)
            for o in offerings
        ):
            schema.fail(
                f"{SECTION}.reservations[{i}]",
                f"{r.instance_type} in {r.zone} is not an on-demand offering of {source!r}",
            )
    for i, rule in enumerate(settings.capacity_failures):
        if not any(rule.matches(o) for o in offerings):
            schema.fail(
                f"{SECTION}.capacityFailures[{i}]", f"{rule.describe()} matches no offering in {source!r}"
            )
    return Catalog(cloud, region, zones, tuple(offerings))


def load_catalog(settings: SimulatedSettings, config: Config) -> Catalog:
    """Read the catalog for the chosen cloud and region; :class:`ProviderConfigError` when it cannot be used."""
    try:
        return _read(settings, config)
    except ProviderConfigError:
        raise
    except ConfigError as err:
        raise ProviderConfigError(err.errors) from None
