"""The ``aws:`` configuration section, checked once at start.

Every problem a user can cause here is reported as one line naming ``aws.<key>`` and the value, all of them at
once, because an EKS deploy that fails one typo at a time costs a rollout per typo.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationError, ValidatorFunctionWrapHandler, model_validator

from autoscaler.config import schema as schema
from autoscaler.config.fields import HERE, Section, checked, error_lines, field_values, problem
from autoscaler.config.fields import integer as integer_schema
from autoscaler.config.options import Config, ConfigError

__all__ = [
    "AMI_FAMILIES",
    "SPOT_ALLOCATION_STRATEGIES",
    "AwsConfigError",
    "AwsSection",
    "AwsSettings",
    "BlockDevice",
    "ManagedTemplate",
    "NamedTemplate",
    "parse_settings",
]

SECTION = "aws"
AL2023, BOTTLEROCKET = "AL2023", "Bottlerocket"
AMI_FAMILIES = (AL2023, BOTTLEROCKET)
SPOT_ALLOCATION_STRATEGIES = ("price-capacity-optimized", "lowest-price", "capacity-optimized")
VOLUME_TYPES = ("gp3", "gp2", "io1", "io2")
DEFAULT_PRICE_REFRESH = 3600.0


class AwsConfigError(ConfigError):
    """A bad ``aws:`` section: a ConfigError (so a ValueError) whose message is one line listing every problem."""


@dataclass(frozen=True, slots=True)
class NamedTemplate:
    """A launch template the user manages; its user data must join the node to the cluster."""

    name: str | None = None
    id: str | None = None
    version: str = "$Default"


@dataclass(frozen=True, slots=True)
class BlockDevice:
    """One EBS volume of a managed launch template; sizes in GiB."""

    device_name: str
    volume_size_gib: int
    volume_type: str = "gp3"
    iops: int | None = None
    throughput: int | None = None
    encrypted: bool = True
    kms_key_id: str | None = None


@dataclass(frozen=True, slots=True)
class ManagedTemplate:
    """A launch template tidal writes from these settings (one per AMI variant and user data)."""

    instance_profile: str
    ami_family: str = AL2023
    ami_id: str | None = None
    ami_ssm_parameter: str | None = None
    kubernetes_version: str | None = None
    block_devices: tuple[BlockDevice, ...] = ()
    user_data: str | None = None
    cluster_endpoint: str | None = None
    cluster_certificate_authority: str | None = None
    cluster_service_cidr: str | None = None


@dataclass(frozen=True, slots=True)
class AwsSettings:
    """The validated ``aws:`` section; durations in seconds."""

    subnet_ids: tuple[str, ...] = ()
    subnet_selector: Mapping[str, str] = field(default_factory=dict)
    security_group_ids: tuple[str, ...] = ()
    launch_template: NamedTemplate | None = None
    managed_launch_template: ManagedTemplate | None = None
    endpoint_url: str | None = None
    catalog_fallback: Path | None = None
    spot_allocation_strategy: str = "price-capacity-optimized"
    spot_interruption_queue: str | None = None
    price_refresh_interval: float = DEFAULT_PRICE_REFRESH
    architectures: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    current_generation_only: bool = False
    eks_cluster_name: str = ""
    # The capacity reservations (and Capacity Blocks) tidal launches into: these ids, and those whose tags match.
    capacity_reservation_ids: tuple[str, ...] = ()
    capacity_reservation_selector: Mapping[str, str] = field(default_factory=dict)
    # What is missing for launching (subnets, a launch template); listing offerings does not need it.
    launch_problems: tuple[str, ...] = ()
    # Why aws.catalogFallback is not used (a file without rows for the region, when only listing offerings).
    catalog_fallback_unused: str = ""

    @property
    def selects_reservations(self) -> bool:
        """Whether any capacity reservation may be launched into (nothing is asked of EC2 otherwise)."""
        return bool(self.capacity_reservation_ids or self.capacity_reservation_selector)


Convert = Callable[[Any, str], Any]

_SUBNET_ID = r"subnet-[0-9a-f]{8,17}"
_SG_ID = r"sg-[0-9a-f]{8,17}"
_AMI_ID = r"ami-[0-9a-f]{8,17}"
_LT_ID = r"lt-[0-9a-f]{8,17}"
_K8S_VERSION = r"1\.[0-9]{1,2}"
_QUEUE_NAME = r"[A-Za-z0-9_-]{1,80}(\.fifo)?"
_FAMILY = r"[a-z][a-z0-9-]*"
_RESERVATION_ID = r"cr-[0-9a-f]{17}"


def _url(value: Any, path: str) -> str:
    url: str = schema.text()(value, path)
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        schema.fail(path, f"{schema.show(value)} is not an http:// or https:// URL")
    return url


def _ids(pattern: str, example: str) -> Convert:
    check = schema.text(pattern=pattern, rule=f"an id like {example}")
    return schema.string_list(item=check, unique=True)


def _tag_selector(value: Any, path: str) -> Mapping[str, str]:
    if not isinstance(value, Mapping) or not value:
        schema.fail(
            path, f"{schema.show(value)} is not a non-empty map of tag: value ('*' matches any value)"
        )
    errors = [
        f"{path}.{key}: {schema.show(val)} is not a string (quote it)"
        for key, val in value.items()
        if not isinstance(key, str) or not key or not isinstance(val, str) or not val
    ]
    if errors:
        raise ConfigError(errors)
    return MappingProxyType(dict(value))


def _path(value: Any, path: str) -> Path:
    return Path(os.path.expanduser(schema.text()(value, path)))


def _queue(value: Any, path: str) -> str:
    text: str = schema.text()(value, path)
    if text.startswith(("https://", "http://")) or re.fullmatch(_QUEUE_NAME, text):
        return text
    schema.fail(path, f"{schema.show(value)} is not an SQS queue URL or queue name")


def _version(value: Any, path: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return str(value)
    text: str = schema.text()(value, path)
    if text in ("$Default", "$Latest") or text.isdigit():
        return text
    schema.fail(path, f"{schema.show(value)} is not a version number, $Default or $Latest")


def _certificate(value: Any, path: str) -> str:
    text: str = schema.text()(value, path)
    try:
        base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        schema.fail(path, "is not base64 (use the cluster's certificateAuthority.data as EKS shows it)")
    return text


def _cidr(value: Any, path: str) -> str:
    text: str = schema.text()(value, path)
    try:
        return str(ipaddress.ip_network(text, strict=True))
    except ValueError:
        schema.fail(path, f"{schema.show(value)} is not a CIDR block like 10.100.0.0/16")


def _devices(value: Any) -> Any:
    if not isinstance(value, list) or not value:
        raise problem(
            f"{HERE}: {schema.show(value)} is not a non-empty list of {{deviceName, volumeSize}} maps"
        )
    return value


def _a_map(value: Any) -> Any:
    if value is None:
        raise problem(f"{HERE}: null is not a map")
    return value


def _not_null(node: dict[str, Any]) -> None:
    """The schema of ``X | None`` as that of ``X``: a null there is refused (so it is no default either)."""
    options = [o for o in node.pop("anyOf", []) if o != {"type": "null"}]
    node.update(options[0] if options else {})
    node.pop("default", None)


_TEXT = {"type": "string"}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_TAGS = {"type": "object", "additionalProperties": {"type": "string"}}


def _text(pattern: str | None = None, rule: str = "") -> checked:
    return checked(schema.text(pattern=pattern, rule=rule), _TEXT)


def _whole(minimum: int, maximum: int) -> checked:
    return checked(schema.integer(minimum=minimum, maximum=maximum), integer_schema(minimum, maximum))


class NamedTemplateModel(Section):
    """A launch template the user manages (its name or its id); its user data must join the node to the cluster."""

    name: Annotated[str | None, _text(r"[A-Za-z0-9().\-/_]{3,128}", "a launch template name")] = Field(
        default=None, description="The launch template's name."
    )
    id: Annotated[str | None, _text(_LT_ID, "an id like lt-0123456789abcdef0")] = Field(
        default=None, description="The launch template's id (lt-...)."
    )
    version: Annotated[str, checked(_version, {"type": ["string", "integer"]})] = Field(
        default="$Default", description="The version launched: a number, $Default or $Latest."
    )

    @model_validator(mode="after")
    def _name_or_id(self) -> NamedTemplateModel:
        if (self.name is None) == (self.id is None):
            raise problem(f"{HERE}: give exactly one of name or id")
        return self

    def spec(self) -> NamedTemplate:
        """The template as the provider launches from it."""
        return NamedTemplate(self.name, self.id, self.version)


class BlockDeviceModel(Section):
    """One EBS volume of the nodes tidal launches; sizes in GiB."""

    device_name: Annotated[str | None, _text(r"/dev/[a-z0-9]+", "a device name like /dev/xvda")] = Field(
        default=None, description="Device name, e.g. /dev/xvda (required)."
    )
    volume_size_gib: Annotated[int | None, _whole(1, 65536)] = Field(
        default=None, alias="volumeSize", description="Size in GiB (required)."
    )
    volume_type: Annotated[str, checked(schema.choice(VOLUME_TYPES), {"enum": list(VOLUME_TYPES)})] = Field(
        default="gp3", description="EBS volume type."
    )
    iops: Annotated[int | None, _whole(100, 256000)] = Field(default=None, description="Provisioned IOPS.")
    throughput: Annotated[int | None, _whole(125, 2000)] = Field(
        default=None, description="Throughput in MiB/s (gp3)."
    )
    encrypted: Annotated[bool, checked(schema.boolean, {"type": "boolean"})] = Field(
        default=True, description="Whether the volume is encrypted."
    )
    kms_key_id: Annotated[str | None, _text()] = Field(
        default=None, description="KMS key that encrypts the volume."
    )

    @model_validator(mode="after")
    def _name_and_size(self) -> BlockDeviceModel:
        given = (("deviceName", self.device_name), ("volumeSize", self.volume_size_gib))
        missing = [key for key, value in given if value is None]
        if missing:
            raise problem(f"{HERE}: {' and '.join(missing)} required")
        return self

    def spec(self) -> BlockDevice:
        """The volume as the provider writes it into the launch template."""
        return BlockDevice(**dict(self))


class ManagedTemplateModel(Section):
    """A launch template tidal writes from these settings (one per AMI variant and user data)."""

    instance_profile: Annotated[str | None, _text()] = Field(
        default=None, description="The node role's instance profile name or ARN (required)."
    )
    ami_family: Annotated[str, checked(schema.choice(AMI_FAMILIES), {"enum": list(AMI_FAMILIES)})] = Field(
        default=AL2023, description="The AMI family nodes boot: AL2023 or Bottlerocket."
    )
    ami_id: Annotated[str | None, _text(_AMI_ID, "an id like ami-0123456789abcdef0")] = Field(
        default=None, description="The AMI nodes boot, instead of the family's recommended one."
    )
    ami_ssm_parameter: Annotated[str | None, _text(r"/\S+", "an SSM parameter name (/...)")] = Field(
        default=None, description="An SSM parameter naming the AMI nodes boot, instead of amiId."
    )
    kubernetes_version: Annotated[str | None, _text(_K8S_VERSION, "a version like 1.31")] = Field(
        default=None, description="The cluster's Kubernetes version, which picks the recommended AMI."
    )
    block_devices: Annotated[tuple[BlockDeviceModel, ...], BeforeValidator(_devices)] = Field(
        default=(), description="The nodes' EBS volumes."
    )
    user_data: Annotated[str | None, _text()] = Field(
        default=None, description="Extra user data for the nodes."
    )
    cluster_endpoint: Annotated[str | None, checked(_url, _TEXT)] = Field(
        default=None, description="The EKS API server endpoint the nodes join."
    )
    cluster_certificate_authority: Annotated[str | None, checked(_certificate, _TEXT)] = Field(
        default=None, description="The cluster's certificate authority data, base64."
    )
    cluster_service_cidr: Annotated[str | None, checked(_cidr, _TEXT)] = Field(
        default=None, description="The cluster's service CIDR block."
    )

    @model_validator(mode="wrap")
    @classmethod
    def _every_problem(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> ManagedTemplateModel:
        """The problems of the template's keys and of what ties them together, all at once."""
        if not isinstance(value, Mapping):
            return handler(value)  # type: ignore[no-any-return]
        lines: list[str] = []
        model: ManagedTemplateModel | None = None
        try:
            model = handler(value)
        except ValidationError as err:
            lines = error_lines(err, cls, prefix=HERE)
        if "instanceProfile" not in value:
            lines.append(f"{HERE}.instanceProfile: required (the node role's instance profile name or ARN)")
        if "amiId" in value and "amiSsmParameter" in value:
            lines.append(f"{HERE}.amiSsmParameter: give amiId or amiSsmParameter, not both")
        if lines or model is None:
            raise problem(*lines)
        return model

    def spec(self) -> ManagedTemplate:
        """The template as the provider writes it."""
        return ManagedTemplate(**{**dict(self), "block_devices": tuple(d.spec() for d in self.block_devices)})


class AwsSection(Section):
    """The keys of the ``aws:`` section; ``parse_settings`` adds the rules that tie them together."""

    subnet_ids: Annotated[
        tuple[str, ...] | None, checked(_ids(_SUBNET_ID, "subnet-0123456789abcdef0"), _STRINGS)
    ] = None
    subnet_selector: Annotated[Mapping[str, str] | None, checked(_tag_selector, _TAGS)] = None
    security_group_ids: Annotated[
        tuple[str, ...] | None, checked(_ids(_SG_ID, "sg-0123456789abcdef0"), _STRINGS)
    ] = None
    # Null is refused, and the schema says so: a map is what either template is.
    launch_template: Annotated[NamedTemplateModel | None, BeforeValidator(_a_map)] = Field(
        default=None, json_schema_extra=_not_null
    )
    managed_launch_template: Annotated[ManagedTemplateModel | None, BeforeValidator(_a_map)] = Field(
        default=None, json_schema_extra=_not_null
    )
    endpoint_url: Annotated[str | None, checked(_url, _TEXT)] = None
    catalog_fallback: Annotated[Path | None, checked(_path, _TEXT)] = None
    spot_allocation_strategy: Annotated[
        str | None,
        checked(schema.choice(SPOT_ALLOCATION_STRATEGIES), {"enum": list(SPOT_ALLOCATION_STRATEGIES)}),
    ] = None
    spot_interruption_queue: Annotated[str | None, checked(_queue, _TEXT)] = None
    price_refresh_interval: Annotated[
        float | None, checked(schema.duration(minimum=60.0), {"type": ["string", "number"]})
    ] = None
    architectures: Annotated[
        tuple[str, ...] | None, checked(schema.string_list(item=schema.architecture, unique=True), _STRINGS)
    ] = None
    families: Annotated[
        tuple[str, ...] | None,
        checked(
            schema.string_list(
                item=schema.text(pattern=_FAMILY, rule="a family like g5 or p4d"), unique=True
            ),
            _STRINGS,
        ),
    ] = None
    current_generation_only: Annotated[bool | None, checked(schema.boolean, {"type": "boolean"})] = None
    capacity_reservation_ids: Annotated[
        tuple[str, ...] | None, checked(_ids(_RESERVATION_ID, "cr-0123456789abcdef0"), _STRINGS)
    ] = None
    capacity_reservation_selector: Annotated[Mapping[str, str] | None, checked(_tag_selector, _TAGS)] = None
    eks_cluster_name: Annotated[
        str | None,
        checked(schema.text(pattern=r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}", rule="an EKS cluster name"), _TEXT),
    ] = None


def _cross_checks(raw: Mapping[str, Any], values: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(mistakes, what launching needs but is missing)."""
    errors, missing = [], []
    if "subnetIds" in raw and "subnetSelector" in raw:
        errors.append(f"{SECTION}.subnetSelector: give subnetIds or subnetSelector, not both")
    elif "subnetIds" not in raw and "subnetSelector" not in raw:
        missing.append(
            f"{SECTION}.subnetIds: required (or {SECTION}.subnetSelector), the subnets nodes launch in"
        )
    elif "subnetIds" in raw and values.get("subnet_ids") == ():
        errors.append(f"{SECTION}.subnetIds: must list at least one subnet")
    if "launchTemplate" in raw and "managedLaunchTemplate" in raw:
        errors.append(
            f"{SECTION}.managedLaunchTemplate: give launchTemplate or managedLaunchTemplate, not both"
        )
    elif "launchTemplate" not in raw and "managedLaunchTemplate" not in raw:
        missing.append(
            f"{SECTION}.launchTemplate: required (or {SECTION}.managedLaunchTemplate), how nodes boot and join"
        )
    if "managedLaunchTemplate" in raw and not raw.get("securityGroupIds"):
        errors.append(f"{SECTION}.securityGroupIds: required with managedLaunchTemplate (the nodes' groups)")
    if "launchTemplate" in raw and "securityGroupIds" in raw:
        errors.append(
            f"{SECTION}.securityGroupIds: only used by managedLaunchTemplate; "
            "a named launchTemplate brings its own security groups"
        )
    return errors, missing


def parse_settings(raw: Mapping[str, Any], config: Config) -> AwsSettings:
    """Validate the raw ``aws:`` map; :class:`AwsConfigError` lists every problem at once.

    Missing subnets or launch template are not mistakes here (listing offerings needs neither): they are kept
    in ``launch_problems`` for whoever launches to refuse.
    """
    values, errors, bad = field_values(AwsSection, raw, SECTION, null_is_absent=False)
    errors += bad
    mistakes, missing = _cross_checks(raw, values)
    errors.extend(mistakes)
    if errors:
        raise AwsConfigError(errors + missing)
    values.setdefault("eks_cluster_name", config.cluster_name)
    for key in ("launch_template", "managed_launch_template"):
        if key in values:
            values[key] = values[key].spec()
    return AwsSettings(**values, launch_problems=tuple(missing))
