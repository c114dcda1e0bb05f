"""The shape of a scenario document as pydantic models: camelCase keys, no unknown key, every value checked by a
converter whose message is the one line a user reads.

Pydantic gives the structure (which keys exist where, lists of entries, nesting); the converters below give the
scenario's own syntax (clock times, quantities, KAI's -1 for "no limit") and its wording. :func:`first_line`
turns a ``ValidationError`` into that one line, with a "did you mean" for a misspelt key.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any, NoReturn

from pydantic import BeforeValidator, Field, ValidationError, model_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from autoscaler.config.fields import HERE, Section, checked, key_path, keys_of, model_at
from autoscaler.config.schema import ConfigError, Converter, parse_duration, suggest
from autoscaler.core.annotations import split_list
from autoscaler.core.model import CAPACITY_TYPES
from autoscaler.core.offering import ReservationKind
from autoscaler.core.quantity import QuantityError, to_milli

_CLOCK = re.compile(r"^(\d{1,3}):([0-5]\d)(?::([0-5]\d))?$")
_GIB = 1024**3 * 1000  # one GiB in milli-units


class ScenarioError(ValueError):
    """A scenario file that cannot be used; one line naming the file and field."""


def _fail(path: str, message: str) -> NoReturn:
    raise ConfigError([f"{path}: {message}"])


def clock_time(value: object, where: str) -> float:
    """``"08:30"`` → seconds after midnight; a duration (``"90m"``) or number is taken as seconds."""
    try:
        return _time(value, where)
    except ConfigError as err:
        raise ScenarioError(err.errors[0]) from None


def _time(value: Any, path: str) -> float:
    if isinstance(value, str):
        m = _CLOCK.match(value.strip())
        if m:
            return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + int(m.group(3) or 0)
    try:
        return parse_duration(value, field=path)
    except ConfigError:
        _fail(path, f"{value!r} is not a time (e.g. 08:30, 90m, 3600)")


def _required(inner: Converter) -> Converter:
    """``inner``, with a null read as the key left out (both say the key is required)."""

    def convert(value: Any, path: str) -> Any:
        if value is None:
            raise PydanticCustomError("missing", "required")
        return inner(value, path)

    return convert


def _whole(*, minimum: int | None = 0, unlimited: bool = False, null: int | None = 0) -> Converter:
    """A whole number at least ``minimum``; with ``unlimited``, -1 (KAI's "no limit") reads as None."""

    def convert(value: Any, path: str) -> int | None:
        if value is None:
            return null
        if isinstance(value, bool) or not isinstance(value, int):
            _fail(path, f"{value!r} is not a whole number")
        if unlimited and value == -1:
            return None
        if minimum is not None and value < minimum:
            _fail(path, f"{value!r} is below {minimum}" + (" (-1 means no limit)" if unlimited else ""))
        return int(value)

    return convert


def _flag(value: Any, path: str) -> bool:
    # A quoted "false" is a non-empty string, which bool() would read as true.
    if not isinstance(value, bool):
        _fail(path, f"{value!r} is not true or false")
    return bool(value)


def _text(value: Any, path: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        _fail(path, f"{value!r} is not a string")
    return str(value)


def _choice(options: Iterable[str], rule: str) -> Converter:
    """A string naming one of ``options``, or empty for the default."""
    known = set(options)

    def convert(value: Any, path: str) -> str:
        text = _text(value, path)
        if text and text not in known:
            _fail(path, f"{text!r} is not {rule}")
        return text

    return convert


def _quantity(value: Any, path: str) -> int:
    try:
        milli = to_milli(value, field=path)
    except QuantityError as err:
        raise ConfigError([str(err)]) from None
    if milli < 0:
        _fail(path, f"{value!r} is below 0")
    return milli


def _offerings(value: Any, path: str) -> str:
    # Checked here, where it is written: on the pods it would only make the simulation skip the job.
    text = _text(value, path)
    values = split_list(text)
    if not values or not set(values) <= set(CAPACITY_TYPES):
        _fail(path, f"{text!r} is not a list of spot, on-demand and reserved")
    return text


def _portion(*, whole: bool) -> Converter:
    """A number from 0 to 1, or (without ``whole``) below 1."""

    def convert(value: Any, path: str) -> float:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not (0 <= value <= 1 if whole else 0 <= value < 1):
            _fail(path, f"{value!r} is not a number " + ("from 0 to 1" if whole else "above 0 and below 1"))
        return float(value)

    return convert


def _member(options: Iterable[str], rule: str) -> Converter:
    """One of ``options``, as it is (a value of another type is named as written)."""
    known = set(options)

    def convert(value: Any, path: str) -> Any:
        if value not in known:
            _fail(path, f"{value!r} is not {rule}")
        return value

    return convert


def _optional(inner: Converter) -> Converter:
    return lambda value, path: None if value is None else inner(value, path)


_TIME_SCHEMA = {"type": ["string", "number"]}
Time = Annotated[float, checked(_time, _TIME_SCHEMA)]
NeededTime = Annotated[float, checked(_required(_time), _TIME_SCHEMA)]
MaybeTime = Annotated[float | None, checked(_optional(_time), _TIME_SCHEMA)]
Text = Annotated[str, checked(_text, {"type": "string"})]
NeededText = Annotated[str, checked(_required(_text), {"type": "string"})]
MaybeText = Annotated[str | None, checked(_optional(_text), {"type": "string"})]
Flag = Annotated[bool, checked(_flag, {"type": "boolean"})]
Quantity = Annotated[int, checked(_quantity, {"type": ["string", "number"]})]
_COUNT = {"type": "integer", "minimum": 0}
Count = Annotated[int, checked(_whole(), _COUNT)]
Signed = Annotated[int, checked(_whole(minimum=None), {"type": "integer"})]
Unlimited = Annotated[
    int | None, checked(_whole(unlimited=True, null=None), {"type": "integer", "minimum": -1})
]


def _entries(value: Any) -> Any:
    """A list left out or null is an empty one."""
    return () if value is None else value


Entries = BeforeValidator(_entries)


class QueueModel(Section):
    name: NeededText
    quota: Unlimited = None
    limit: Unlimited = None
    over_quota_weight: Annotated[int, checked(_whole(null=1), _COUNT)] = 1
    priority: Signed = 0
    parent: Text = ""


class JobModel(Section):
    at: Time
    name: Text
    pods: Annotated[int, checked(_whole(minimum=1), {"type": "integer", "minimum": 1})] = 1
    gpus: Count = 0
    cpu: Quantity = 1000
    memory: Quantity = 4 * _GIB
    duration: Time = 3600.0
    queue: Text = ""
    gang: Flag = False
    preemptible: Flag = True
    offerings: Annotated[str, checked(_offerings, {"type": "string"})] = ""
    gpu_skus: Text = ""
    partial_gpu: Flag = False
    priority: Signed = 0
    # A share of one GPU asked of KAI instead of whole GPUs: a portion (0 < f < 1) or GPU memory in MiB,
    # and how pods on one device share its compute ("time-slicing" or "sm-sharing").
    gpu_fraction: Annotated[float, checked(_portion(whole=False), {"type": "number"})] = 0.0
    gpu_memory: Count = 0
    compute_mode: Annotated[
        str,
        checked(_choice(("time-slicing", "sm-sharing"), "time-slicing or sm-sharing"), {"type": "string"}),
    ] = ""
    # The work one spot interruption loses its pods (their tidal.dev/interruption-cost annotation).
    interruption_cost: Text = ""

    @model_validator(mode="after")
    def _one_share(self) -> JobModel:
        """A job's share of a GPU is checked as KAI would check it."""
        fraction, memory, mode = self.gpu_fraction, self.gpu_memory, self.compute_mode
        if fraction and memory:
            _problem("gpuMemory", f"{memory!r} is set beside gpuFraction (give one of them)")
        if (fraction or memory) and self.gpus:
            _problem("gpus", f"{self.gpus!r} is set beside a GPU share (a pod asks for one or the other)")
        if mode and not (fraction or memory):
            _problem("computeMode", f"{mode!r} is set without gpuFraction or gpuMemory")
        return self


class InterruptionModel(Section):
    at: NeededTime
    fraction: Annotated[float, checked(_portion(whole=True), {"type": "number"})] = 1.0


class SpotRatesModel(Section):
    """Spot nodes interrupted at their type's published rate (the catalog's Spot Advisor bucket), its share
    of instances counted over ``period`` of running; when each is, drawn once per node from ``seed``."""

    period: NeededTime
    seed: Count = 0

    @model_validator(mode="after")
    def _period_is_some_time(self) -> SpotRatesModel:
        if self.period <= 0:
            _problem("period", "{period!r} is not longer than 0s", as_written=True)
        return self


class OutageModel(Section):
    at: NeededTime
    until: NeededTime
    instance_type: MaybeText = None
    zone: MaybeText = None
    capacity_type: Annotated[
        str | None, checked(_optional(_member(CAPACITY_TYPES, "spot or on-demand")), {"type": "string"})
    ] = None

    @model_validator(mode="after")
    def _ends_after_it_starts(self) -> OutageModel:
        if self.until <= self.at:
            _problem("until", "{until!r} is not after at ({at!r})", as_written=True)
        return self


class ReservationModel(Section):
    id: NeededText
    instance_type: NeededText
    zone: NeededText
    count: Annotated[int, checked(_required(_whole(minimum=1)), {"type": "integer", "minimum": 1})]
    kind: Annotated[
        str,
        checked(
            _member([k.value for k in ReservationKind], "open, targeted or capacity-block"),
            {"type": "string"},
        ),
    ] = ReservationKind.OPEN.value
    at: MaybeTime = None
    until: MaybeTime = None

    @model_validator(mode="after")
    def _window(self) -> ReservationModel:
        if self.kind == ReservationKind.CAPACITY_BLOCK.value and (self.at is None or self.until is None):
            _problem("", "a capacity-block needs at and until")
        if self.at is not None and self.until is not None and self.until <= self.at:
            _problem("until", "{until!r} is not after at ({at!r})", as_written=True)
        return self


class KueueModel(Section):
    provisioning_class: Annotated[
        str,
        checked(
            _choice(
                (
                    "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                    "check-capacity.autoscaling.x-k8s.io",
                ),
                "best-effort-atomic-scale-up.autoscaling.x-k8s.io or check-capacity.autoscaling.x-k8s.io",
            ),
            {"type": "string"},
        ),
    ] = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
    gpu_quota: Unlimited = None
    retry_after: Time = 60.0


class BufferModel(Section):
    name: NeededText
    replicas: Count = 1
    gpus: Count = 0
    cpu: Quantity = 1000
    memory: Quantity = 4 * _GIB


class TraceModel(Section):
    file: NeededText
    start: Time = 0.0
    window: MaybeTime = None
    gpu_sharing: Annotated[str, checked(_choice(("kai", "whole"), "kai or whole"), {"type": "string"})] = ""


class CatalogModel(Section):
    file: NeededText
    cloud: Text = ""
    region: Text = ""


def _name(value: Any, path: str) -> str:
    if not isinstance(value, str):
        _fail(path, f"{value!r} is not a string")
    return str(value)


def _config(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        _fail(path, "expected a map of tidal configuration keys")
    return dict(value)


class ScenarioModel(Section):
    name: Annotated[str, checked(_name, {"type": "string"})] = "scenario"
    duration: Time = 24 * 3600.0
    config: Annotated[dict[str, Any], checked(_config, {"type": ["object", "null"]})] = Field(
        default_factory=dict
    )
    queues: Annotated[tuple[QueueModel, ...], Entries] = ()
    jobs: Annotated[tuple[JobModel, ...], Entries] = ()
    spot_interruptions: Annotated[tuple[InterruptionModel, ...], Entries] = ()
    spot_interruption_rates: SpotRatesModel | None = None
    capacity_outages: Annotated[tuple[OutageModel, ...], Entries] = ()
    trace: TraceModel | None = None
    catalog: CatalogModel | None = None
    reservations: Annotated[tuple[ReservationModel, ...], Entries] = ()
    kueue: KueueModel | None = None
    buffers: Annotated[tuple[BufferModel, ...], Entries] = ()

    @model_validator(mode="after")
    def _names_tie_together(self) -> ScenarioModel:
        """Names that entries use to point at each other are unique and point somewhere."""
        names = _unique([q.name for q in self.queues], "queues")
        for i, queue in enumerate(self.queues):
            if queue.parent and (queue.parent == queue.name or queue.parent not in names):
                _problem(
                    f"queues[{i}].parent", f"{queue.parent!r} is not another queue of the scenario", top=True
                )
        # Two jobs of one name would make pods of one name: the later would silently replace the earlier.
        _unique([j.name for j in self.jobs], "jobs")
        for j in self.jobs:
            if j.queue and self.queues and j.queue not in names:
                _problem(f"job {j.name}", f"queue {j.queue!r} is not defined", top=True)
        _unique([r.id for r in self.reservations], "reservations")
        _unique([b.name for b in self.buffers], "buffers")
        return self


def _unique(names: list[str], where: str) -> set[str]:
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            _problem(f"{where}[{i}].name", f"{name!r} is already the name of {where}[{seen[name]}]", top=True)
        seen[name] = i
    return set(seen)


def _problem(key: str, message: str, *, as_written: bool = False, top: bool = False) -> NoReturn:
    """Fail a check that ties keys of one entry together, naming ``key`` of it (``top``: ``key`` is a whole
    path from the document's root). With ``as_written``, ``message`` is a template of the entry's keys, filled
    with their values as the user wrote them rather than as converted."""
    path = key if top else (f"{HERE}.{key}" if key else HERE)
    raise PydanticCustomError(
        "tidal", "{lines}", {"lines": (f"{path}: {message}",), "as_written": as_written}
    )


# --- pydantic's errors as the scenario's one line ---------------------------------------------------------


def _raw_at(data: Any, loc: Iterable[Any]) -> Any:
    for part in loc:
        data = data[part]
    return data


def _line(problem: ErrorDetails, data: Any) -> str:
    loc = tuple(problem["loc"])
    kind, value = problem["type"], problem["input"]
    where = key_path(loc[:-1])
    if kind == "tidal":
        path = key_path(loc)
        line: str = problem["ctx"]["lines"][0].replace(HERE, path)
        return line.format(**_raw_at(data, loc)) if problem["ctx"].get("as_written") else line
    if kind == "extra_forbidden":
        known = keys_of(model_at(ScenarioModel, loc[:-1]) or ScenarioModel)
        hint = suggest(str(loc[-1]), known)
        more = f"did you mean {hint!r}?" if hint else f"known: {', '.join(sorted(known))}"
        return f"{where + ': ' if where else ''}unknown key {loc[-1]!r} ({more})"
    if kind == "missing":
        if loc[0] == "jobs":
            return f"{where}: 'name' and 'at' are required"
        return f"{where}: {loc[-1]!r} is required"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"{key_path(loc)}: {value!r} is not a map" if loc else "the scenario must be a map"
    if kind in ("tuple_type", "list_type"):
        return f"{key_path(loc)}: {value!r} is not a list"
    return f"{key_path(loc)}: {value!r} is not valid ({problem['msg']})"


def first_line(err: ValidationError, data: Any) -> str:
    """The problem a user fixes first, as one line: a misspelt key before a bad value."""
    problems = sorted(err.errors(include_url=False), key=lambda p: p["type"] != "extra_forbidden")
    return _line(problems[0], data)


def validate(data: Any) -> ScenarioModel:
    """``data`` as a :class:`ScenarioModel`, or a :class:`ScenarioError` of one line naming the field."""
    try:
        return ScenarioModel.model_validate(data)
    except ValidationError as err:
        raise ScenarioError(first_line(err, data)) from None
