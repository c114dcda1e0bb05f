"""The ``gcp:`` configuration section, checked once when the provider starts.

Every problem a user can cause here is reported as ``gcp.<key>: …`` (or ``zones: …``), all of them at once,
in one :class:`ProviderConfigError`, never as a traceback.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from autoscaler.config import schema as schema
from autoscaler.config.fields import Section, checked, field_values
from autoscaler.config.options import Config, ConfigError

__all__ = [
    "SECTION",
    "GcpSection",
    "GcpSettings",
    "NodePoolRef",
    "ProviderConfigError",
    "TemplateRef",
    "parse_settings",
]

SECTION = "gcp"
DRIVER_VERSIONS = ("default", "latest", "disabled")

_PROJECT = r"([a-z0-9.-]+:)?[a-z][-a-z0-9]{4,28}[a-z0-9]"
_NAME = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
_TEMPLATE = re.compile(
    rf"(https://(www|compute)\.googleapis\.com/compute/v1/)?"
    rf"projects/(?P<project>{_PROJECT})/(global|regions/(?P<region>[a-z0-9-]+))/instanceTemplates/(?P<name>{_NAME})"
)
_URL = re.compile(r"https?://[^/\s]+(/[^\s]*)?")


class ProviderConfigError(ConfigError):
    """A bad ``gcp:`` section; a ValueError (via ConfigError) whose message is one line."""


@dataclass(frozen=True, slots=True)
class TemplateRef:
    """A global (``region`` empty) or regional instance template."""

    project: str
    name: str
    region: str = ""

    @property
    def path(self) -> str:
        """``projects/p/global/instanceTemplates/name`` (or ``…/regions/r/…``)."""
        where = f"regions/{self.region}" if self.region else "global"
        return f"projects/{self.project}/{where}/instanceTemplates/{self.name}"

    @classmethod
    def parse(cls, text: str, default_project: str) -> TemplateRef | None:
        """A full or partial template URL, or a bare name in ``default_project``; None when neither."""
        m = _TEMPLATE.fullmatch(text)
        if m:
            return cls(m.group("project"), m.group("name"), m.group("region") or "")
        if re.fullmatch(_NAME, text):
            return cls(default_project, text)
        return None


@dataclass(frozen=True, slots=True)
class NodePoolRef:
    """A GKE node pool whose instance template tidal launches from (found through its instance group)."""

    name: str
    cluster: str = ""


@dataclass(frozen=True, slots=True)
class GcpSettings:
    """The validated ``gcp:`` section; durations in seconds."""

    project: str
    template: TemplateRef | None = None
    node_pool: NodePoolRef | None = None
    endpoint: str | None = None
    billing_endpoint: str | None = None
    catalog_fallback: Path | None = None
    gpu_price_fallback: Path | None = None
    price_refresh_interval: float = 3600.0
    request_timeout: float = 30.0
    operation_timeout: float = 20.0
    poll_interval: float = 2.0
    gpu_driver_version: str = "default"
    # Reservations (by name, in the configured zones) tidal launches into.
    reservations: tuple[str, ...] = ()
    # What launching needs and the section lacks (built only to list offerings): launch() refuses with it.
    launch_problems: tuple[str, ...] = ()


def _url(value: Any, path: str) -> str:
    text: str = schema.text()(value, path)
    if not _URL.fullmatch(text):
        schema.fail(path, f"{schema.show(value)} is not an http(s) URL (e.g. http://127.0.0.1:8080)")
    return text.rstrip("/")


def _path(value: Any, path: str) -> Path:
    p = Path(os.path.expanduser(schema.text()(value, path)))
    if not p.is_file():
        schema.fail(path, f"{str(p)!r} is not a readable file")
    return p


def _node_pool(value: Any, path: str) -> NodePoolRef:
    if not isinstance(value, Mapping):
        schema.fail(path, f"{schema.show(value)} is not a map like {{name: gpu-pool, cluster: my-cluster}}")
    errors = schema.unknown_keys(value, ("name", "cluster"), f"{path}.")
    name = cluster = ""
    for key in ("name", "cluster"):
        if key not in value:
            continue
        try:
            got = schema.text(pattern=_NAME, rule="a GKE node pool or cluster name")(
                value[key], f"{path}.{key}"
            )
        except ConfigError as err:
            errors.extend(err.errors)
            continue
        name, cluster = (got, cluster) if key == "name" else (name, got)
    if "name" not in value:
        errors.append(f"{path}.name: required (the node pool whose instance template tidal launches from)")
    if errors:
        raise ConfigError(errors)
    return NodePoolRef(name, cluster)


_TEXT = {"type": ["string", "null"]}
_DURATION = {"type": ["string", "number", "null"]}


class GcpSection(Section):
    """The keys of the ``gcp:`` section (null is the same as absent); ``parse_settings`` adds what ties them
    to each other and to the rest of the configuration."""

    project: Annotated[str | None, checked(schema.text(pattern=_PROJECT, rule="a GCP project ID"), _TEXT)] = (
        None
    )
    instance_template: Annotated[str | None, checked(lambda value, path: value, _TEXT)] = None
    node_pool: Annotated[NodePoolRef | None, checked(_node_pool, {"type": ["object", "null"]})] = None
    endpoint: Annotated[str | None, checked(_url, _TEXT)] = None
    billing_endpoint: Annotated[str | None, checked(_url, _TEXT)] = None
    catalog_fallback: Annotated[Path | None, checked(_path, _TEXT)] = None
    gpu_price_fallback: Annotated[Path | None, checked(_path, _TEXT)] = None
    price_refresh_interval: Annotated[float | None, checked(schema.duration(minimum=60.0), _DURATION)] = None
    request_timeout: Annotated[float | None, checked(schema.duration(), _DURATION)] = None
    operation_timeout: Annotated[float | None, checked(schema.duration(), _DURATION)] = None
    poll_interval: Annotated[float | None, checked(schema.duration(), _DURATION)] = None
    gpu_driver_version: Annotated[
        str | None, checked(schema.choice(DRIVER_VERSIONS), {"enum": [*DRIVER_VERSIONS, None]})
    ] = None
    reservations: Annotated[
        tuple[str, ...] | None,
        checked(
            schema.string_list(item=schema.text(pattern=_NAME, rule="a reservation name"), unique=True),
            {"type": ["array", "null"], "items": {"type": "string"}},
        ),
    ] = None


def _zones(config: Config) -> list[str]:
    if not config.zones:
        return [f"zones: the gcp provider needs the zones to launch in, e.g. [{config.region}-a]"]
    return [
        f"zones: {zone!r} is not in region {config.region!r}"
        for zone in config.zones
        if zone.rsplit("-", 1)[0] != config.region
    ]


def parse_settings(raw: Mapping[str, Any], config: Config, *, launching: bool = True) -> GcpSettings:
    """Validate the raw ``gcp:`` map; raise :class:`ProviderConfigError` listing every problem.

    ``launching=False`` is for listing offerings only (``tidal catalog``): the instance template or node
    pool and the zones may be missing (the region's zones are listed then), and the project may come from
    the environment (``GOOGLE_CLOUD_PROJECT``); what launching needs is kept in ``launch_problems`` for
    :meth:`GcpProvider.launch` to refuse with."""
    values, errors, bad = field_values(GcpSection, raw, SECTION)
    errors += bad
    missing: list[str] = []
    values.pop("instance_template", None)  # read below, with the project it defaults to
    if raw.get("project") is None:
        project = "" if launching else environment_project()
        if project:
            values["project"] = project
        else:
            errors.append(
                f"{SECTION}.project: required (the project the cluster's VMs run in"
                + ("" if launching else "; or set GOOGLE_CLOUD_PROJECT")
                + ")"
            )
    template = raw.get("instanceTemplate")
    if template is not None:
        ref = TemplateRef.parse(template, values.get("project", "")) if isinstance(template, str) else None
        if ref is None:
            errors.append(
                f"{SECTION}.instanceTemplate: {schema.show(template)} is not an instance template "
                "(projects/P/global/instanceTemplates/NAME, projects/P/regions/R/instanceTemplates/NAME "
                "or NAME)"
            )
        values["template"] = ref
    has_pool = raw.get("nodePool") is not None
    if template is None and not has_pool:
        missing.append(
            f"{SECTION}.instanceTemplate: required, or {SECTION}.nodePool: {{name: …}} "
            "(the GKE node pool whose template makes a VM join the cluster)"
        )
    elif template is not None and has_pool:
        errors.append(f"{SECTION}.nodePool: give either {SECTION}.instanceTemplate or {SECTION}.nodePool")
    zones = _zones(config)
    if config.zones:
        errors.extend(zones)
    else:
        missing.extend(zones)
    if launching:
        errors.extend(missing)
    if errors:
        raise ProviderConfigError(errors, SECTION)
    return GcpSettings(**values, launch_problems=tuple(missing))


def environment_project() -> str:
    """The project the environment names (``GOOGLE_CLOUD_PROJECT``, gcloud's ``CLOUDSDK_CORE_PROJECT``), or
    ``""``; for listing offerings without a ``gcp.project``."""
    return os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT") or ""
