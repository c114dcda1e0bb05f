"""The shape of the configuration document as pydantic models: camelCase keys, no unknown key, every value
checked by a tidal converter (``config_schema``) so a mistake reads the same one line however it is found.

Pydantic gives the structure (which keys exist where, nesting, the JSON Schema editors validate the ConfigMap
with); the converters give Kubernetes' own syntax (quantities, durations, label keys, taints) and the
messages. :func:`error_lines` turns a pydantic ``ValidationError`` into ``"keyPath: message"`` lines, each with
a "did you mean" for an unknown key; nothing of pydantic's own wording or layout reaches a user.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationError
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, ErrorDetails, PydanticCustomError, core_schema

from autoscaler.config import schema as schema
from autoscaler.config.schema import ConfigError, Converter
from autoscaler.core.disruption.budgets import Budget, budget_list
from autoscaler.core.disruption.unhealthy import ConditionRule, condition_rules
from autoscaler.core.gpu.layouts import GpuSharing, gpu_sharing
from autoscaler.core.model import CAPACITY_TYPES, ON_DEMAND, Taint
from autoscaler.core.resources import Resources

__all__ = [
    "HERE",
    "KEEP",
    "RELEASE",
    "SECTION_MODELS",
    "VERBATIM",
    "WAIT",
    "ConfigDocument",
    "Section",
    "checked",
    "error_lines",
    "field_values",
    "keys_of",
]

# Stands for the key path in a converter's message until the error is translated: a pydantic validator does
# not know where in the document its value sits, the ValidationError's location does.
HERE = "\x00"
_ERROR_TYPE = "tidal"

KEEP = "keep"
RELEASE = "release"
WAIT = "wait"


class checked:
    """An ``Annotated`` marker: validate with ``convert`` (its ConfigError becomes a pydantic error carrying
    the converter's own lines) and show ``json_schema`` in the JSON Schema."""

    def __init__(self, convert: Converter, json_schema: Mapping[str, Any]) -> None:
        self.convert = convert
        self.json_schema = dict(json_schema)

    def validate(self, value: Any) -> Any:
        """The converted value, or a pydantic error holding the converter's lines."""
        try:
            return self.convert(value, HERE)
        except ConfigError as err:
            raise PydanticCustomError(_ERROR_TYPE, "{lines}", {"lines": tuple(err.errors)}) from None

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(self.validate)

    def __get_pydantic_json_schema__(
        self, core: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return dict(self.json_schema)


def _nullable(json_schema: Mapping[str, Any]) -> dict[str, Any]:
    return {"anyOf": [dict(json_schema), {"type": "null"}]}


_STRING = {"type": "string", "minLength": 1}
_BOOL = {"type": "boolean"}
_NUMBER = {"type": "number"}
_DURATION = {"type": ["string", "number"], "pattern": r"^([0-9.]+(ms|s|m|h))+$|^[0-9.]+$"}
_QUANTITY = {"type": ["string", "number"]}
_STRINGS = {"type": ["array", "null"], "items": {"type": "string"}, "uniqueItems": True}
_STRING_MAP = {"type": ["object", "null"], "additionalProperties": {"type": "string"}}
_SELECTOR = {"anyOf": [{"type": "string"}, _STRING_MAP]}
_RESOURCES = {"type": "object", "additionalProperties": {"type": ["string", "number"]}}
_ANY_LIST = {"type": ["array", "null"], "items": {"type": ["object", "string"]}}


def _integer(minimum: int, maximum: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "integer", "minimum": minimum}
    return out if maximum is None else {**out, "maximum": maximum}


def _choice(options: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "string", "enum": list(options)}


_CLUSTER_NAME = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL = "a DNS label (lowercase letters, digits and '-')"

Text = Annotated[str, checked(schema.text(), _STRING)]
Flag = Annotated[bool, checked(schema.boolean, _BOOL)]
Duration = Annotated[float, checked(schema.duration(), _DURATION)]
Wait = Annotated[float, checked(schema.duration(positive=False), _DURATION)]
Share = Annotated[
    float, checked(schema.number(minimum=0, maximum=1), {**_NUMBER, "minimum": 0, "maximum": 1})
]
AtLeastOne = Annotated[int, checked(schema.integer(minimum=1), _integer(1))]
Quantity = Annotated[int, checked(schema.quantity, _QUANTITY)]
Strings = Annotated[tuple[str, ...], checked(schema.string_list(unique=True), _STRINGS)]
Regexp = Annotated[re.Pattern[str] | None, checked(schema.regexp(empty_is_none=True), {"type": "string"})]
Overhead = Annotated[Resources | None, checked(schema.optional(schema.resources), _nullable(_RESOURCES))]


class Section(BaseModel):
    """A map of options: camelCase keys, none unknown; the converters hold the values' own rules."""

    model_config = ConfigDict(
        alias_generator=to_camel, extra="forbid", frozen=True, arbitrary_types_allowed=True
    )


class ScaleDownModel(Section):
    enabled: Flag
    node_unneeded_duration: Wait
    utilization_threshold_bin_packing: Share
    utilization_threshold_bin_selection: Share
    max_parallel_drains: AtLeastOne
    max_empty_bulk_delete: AtLeastOne
    replace_savings: Share
    replace_young_pods_within: Wait


class ReservationsModel(Section):
    reserved_nodes: Annotated[str, checked(schema.choice((KEEP, RELEASE)), _choice((KEEP, RELEASE)))]
    drain_before_block_end: Duration
    before_block_start: Annotated[
        str, checked(schema.choice((WAIT, ON_DEMAND.value)), _choice((WAIT, ON_DEMAND.value)))
    ]


class DisruptionModel(Section):
    budgets: Annotated[tuple[Budget, ...], checked(budget_list, _ANY_LIST)]
    node_max_lifetime: Wait
    drift: Flag
    unhealthy_conditions: Annotated[tuple[ConditionRule, ...], checked(condition_rules, _ANY_LIST)]
    replacement_timeout: Duration


class LeaderElectionModel(Section):
    enabled: Flag
    namespace: Annotated[
        str,
        checked(schema.text(pattern=_CLUSTER_NAME, rule="a DNS label", max_length=63), _STRING),
    ]
    lease_name: Annotated[
        str, checked(schema.text(pattern=r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", rule="a DNS name"), _STRING)
    ]
    lease_duration: Duration
    renew_deadline: Duration
    retry_period: Annotated[float, checked(schema.duration(minimum=1.0), _DURATION)]


class KubeClientModel(Section):
    qps: Annotated[float, checked(schema.number(minimum=0), {**_NUMBER, "minimum": 0})]
    burst: AtLeastOne


class ConfigDocument(Section):
    """Every top-level option but the providers' sections, which each provider checks with its own model."""

    cloud: Text
    region: Text
    zones: Strings
    cluster_name: Annotated[
        str, checked(schema.text(pattern=_CLUSTER_NAME, max_length=63, rule=_DNS_LABEL), _STRING)
    ]
    labels: Annotated[
        Mapping[str, str],
        checked(schema.string_map(label_syntax=True, label_values=True, selector=True), _SELECTOR),
    ]
    pod_annotations: Annotated[
        Mapping[str, str], checked(schema.string_map(label_syntax=True, selector=True), _SELECTOR)
    ]
    scheduler_names: Strings
    pending_pod_reason_regexp: Annotated[re.Pattern[str], checked(schema.regexp(), {"type": "string"})]
    # The two keys whose camelCase keeps an acronym whole, as Luna spells them.
    cluster_gpu_limit: Annotated[
        int | None,
        checked(schema.optional(schema.integer(minimum=0)), _nullable(_integer(0))),
        Field(alias="clusterGPULimit"),
    ]
    cluster_cpu_limit: Annotated[
        int | None,
        checked(schema.optional(schema.quantity), _nullable(_QUANTITY)),
        Field(alias="clusterCPULimit"),
    ]
    max_nodes: Annotated[
        int | None, checked(schema.optional(schema.integer(minimum=0)), _nullable(_integer(0)))
    ]
    max_node_cost_per_hour: Annotated[
        float | None,
        checked(schema.optional(schema.number(positive=True)), _nullable({**_NUMBER, "exclusiveMinimum": 0})),
    ]
    max_fallback_price_ratio: Annotated[
        float | None,
        checked(schema.optional(schema.number(above=1)), _nullable({**_NUMBER, "exclusiveMinimum": 1})),
    ]
    queue_budgets: Annotated[
        Mapping[str, float],
        checked(
            schema.number_map(item=schema.number(positive=True)),
            {"type": ["object", "null"], "additionalProperties": {**_NUMBER, "exclusiveMinimum": 0}},
        ),
    ]
    capacity_types: Annotated[
        tuple[str, ...],
        checked(
            schema.string_list(item=schema.choice(CAPACITY_TYPES), non_empty=True, unique=True),
            {
                "type": "array",
                "items": _choice(CAPACITY_TYPES),
                "minItems": 1,
                "uniqueItems": True,
            },
        ),
    ]
    instance_family_inclusions: Strings
    instance_family_exclusions: Strings
    instance_type_regexp: Regexp
    gpu_skus: Strings
    architectures: Annotated[
        tuple[str, ...],
        checked(
            schema.string_list(item=schema.architecture, non_empty=True, unique=True),
            {"type": "array", "items": _choice(("amd64", "arm64", "x86_64", "aarch64")), "minItems": 1},
        ),
    ]
    bin_select_pod_cpu_threshold: Quantity
    bin_select_pod_memory_threshold: Quantity
    bin_packing_node_cpu: Quantity
    bin_packing_node_memory: Quantity
    bin_packing_node_min_pod_count: AtLeastOne
    bin_packing_node_type_regexp: Regexp
    node_labels: Annotated[
        Mapping[str, str], checked(schema.string_map(label_syntax=True, label_values=True), _STRING_MAP)
    ]
    node_taints: Annotated[tuple[Taint, ...], checked(schema.taint_list, _ANY_LIST)]
    node_tags: Annotated[Mapping[str, str], checked(schema.string_map(label_syntax=False), _STRING_MAP)]
    daemon_set_overhead: Overhead
    kube_reserved: Overhead
    max_pods_per_node: Annotated[int, checked(schema.integer(minimum=1, maximum=1000), _integer(1, 1000))]
    gpu_node_taint: Flag
    assume_extended_resource_toleration: Flag
    gpu_sharing: Annotated[GpuSharing, checked(gpu_sharing, {"type": ["object", "null"]})]
    scale_down: ScaleDownModel
    reservations: ReservationsModel
    disruption: DisruptionModel
    scan_interval: Duration
    batch_idle_duration: Wait
    batch_max_duration: Duration
    registration_timeout: Duration
    gpu_readiness_timeout: Duration
    offering_unavailable_duration: Duration
    gang_launch_timeout: Duration
    new_node_grace_period: Wait
    max_parallel_launches: AtLeastOne
    leader_election: LeaderElectionModel
    kube_client: KubeClientModel
    metrics_address: Annotated[str, checked(schema.address, {"type": "string", "pattern": ":[0-9]+$"})]
    log_format: Annotated[
        str, checked(schema.choice(("auto", "json", "console")), _choice(("auto", "json", "console")))
    ]
    log_level: Annotated[
        str,
        checked(
            schema.choice(("debug", "info", "warning", "error")),
            _choice(("debug", "info", "warning", "error")),
        ),
    ]


SECTION_MODELS: dict[str, type[Section]] = {
    "scaleDown": ScaleDownModel,
    "reservations": ReservationsModel,
    "disruption": DisruptionModel,
    "leaderElection": LeaderElectionModel,
    "kubeClient": KubeClientModel,
}

# A Luna-style ConfigMap entry for a string option is taken verbatim: read as YAML, a regexp such as
# "[0-9]+" would turn into a list and "a: b" into a map.
VERBATIM = frozenset(
    {
        "cloud",
        "region",
        "clusterName",
        "labels",
        "podAnnotations",
        "pendingPodReasonRegexp",
        "instanceTypeRegexp",
        "binPackingNodeTypeRegexp",
        "metricsAddress",
        "logFormat",
        "logLevel",
    }
)


# --- pydantic's errors as tidal's lines -------------------------------------------------------------------


def keys_of(model: type[BaseModel]) -> list[str]:
    """The keys a model takes, as a user writes them."""
    return [field.alias or name for name, field in model.model_fields.items()]


def _model_at(model: type[BaseModel], loc: Iterable[Any]) -> type[BaseModel] | None:
    """The model that holds the last key of ``loc`` (None when ``loc`` leaves the models)."""
    for part in loc:
        fields = {field.alias or name: field for name, field in model.model_fields.items()}
        inner = fields[part].annotation if part in fields else None
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return None
        model = inner
    return model


def _path(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def error_lines(
    err: ValidationError | Iterable[ErrorDetails],
    model: type[BaseModel],
    *,
    prefix: str = "",
    more_keys: Callable[[str], Iterable[str]] = lambda path: (),
) -> list[str]:
    """Every problem of ``err`` as a ``"keyPath: message"`` line; ``prefix`` is where ``model`` sits in the
    document, ``more_keys(path)`` names keys the map at ``path`` takes besides the model's (provider sections)."""
    lines: list[str] = []
    # Unknown keys first, as a reader checks the spelling of a key before its value.
    found = err.errors(include_url=False) if isinstance(err, ValidationError) else err
    problems = sorted(found, key=lambda p: p["type"] != "extra_forbidden")
    for problem in problems:
        loc = problem["loc"]
        path = _path((prefix, *loc) if prefix else loc)
        kind, value = problem["type"], problem["input"]
        if kind == _ERROR_TYPE:
            lines.extend(line.replace(HERE, path) for line in problem["ctx"]["lines"])
        elif kind == "extra_forbidden":
            holder = _model_at(model, loc[:-1])
            known = [*keys_of(holder), *more_keys(_path(loc[:-1]))] if holder else []
            hint = schema.suggest(str(loc[-1]), known)
            lines.append(f"{path}: unknown key" + (f" (did you mean {hint!r}?)" if hint else ""))
        elif kind == "missing":
            lines.append(f"{path}: required")
        elif kind in ("model_type", "dict_type", "model_attributes_type"):
            lines.append(f"{path}: {schema.show(value)} is not a map")
        else:  # a provider's own model using pydantic's types: keep the value, word the rule plainly
            message = str(problem["msg"])
            lines.append(f"{path}: {schema.show(value)} is not valid ({message[:1].lower()}{message[1:]})")
    return lines


def field_values(
    model: type[BaseModel], raw: Mapping[str, Any], prefix: str, *, null_is_absent: bool = True
) -> tuple[dict[str, Any], list[str], list[str]]:
    """The options ``raw`` gives (a null one is left out, as if absent, unless ``null_is_absent`` is off),
    each validated by its field of ``model`` on its own, so that a bad option does not hide the good ones from
    checks that tie options together; then the lines for unknown keys, and those for bad values, apart."""
    unknown = schema.unknown_keys(raw, keys_of(model), f"{prefix}." if prefix else "")
    values: dict[str, Any] = {}
    bad: list[str] = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key not in raw or (null_is_absent and raw[key] is None):
            continue
        try:
            valid = model.__pydantic_validator__.validate_assignment(model.model_construct(), name, raw[key])
            values[name] = getattr(valid, name)
        except ValidationError as err:
            # An assignment's errors name the attribute; the user wrote the key.
            found = [
                ErrorDetails(**{**p, "loc": (key, *p["loc"][1:])}) for p in err.errors(include_url=False)
            ]
            bad.extend(error_lines(found, model, prefix=prefix))
    return values, unknown, bad
