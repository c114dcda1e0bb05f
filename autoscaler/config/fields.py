"""The building blocks of tidal's pydantic models: fields checked by a tidal converter, the :class:`Section`
base (camelCase keys, none unknown), and pydantic's errors as tidal's one-line ``"keyPath: message"`` errors.

Pydantic gives the structure (which keys exist where, nesting, the JSON Schema); the converters of
:mod:`autoscaler.config.schema` give Kubernetes' own syntax and the messages. :func:`error_lines` turns a
``ValidationError`` into lines, each with a "did you mean" for an unknown key; nothing of pydantic's own wording
or layout reaches a user.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Annotated, Any, get_args

from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationError
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, ErrorDetails, PydanticCustomError, core_schema

from autoscaler.config import schema as schema
from autoscaler.config.schema import ConfigError, Converter
from autoscaler.core.resources import Resources

__all__ = [
    "HERE",
    "AtLeastOne",
    "Duration",
    "Flag",
    "Overhead",
    "Quantity",
    "Regexp",
    "Section",
    "Share",
    "Strings",
    "Text",
    "Wait",
    "checked",
    "error_lines",
    "field_values",
    "key_path",
    "keys_of",
    "model_at",
    "problem",
]

# Stands for the key path in a converter's message until the error is translated: a pydantic validator does
# not know where in the document its value sits, the ValidationError's location does.
HERE = "\x00"
_ERROR_TYPE = "tidal"


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


def nullable(json_schema: Mapping[str, Any]) -> dict[str, Any]:
    return {"anyOf": [dict(json_schema), {"type": "null"}]}


STRING = {"type": "string", "minLength": 1}
BOOL = {"type": "boolean"}
NUMBER = {"type": "number"}
DURATION = {"type": ["string", "number"], "pattern": r"^([0-9.]+(ms|s|m|h))+$|^[0-9.]+$"}
QUANTITY = {"type": ["string", "number"]}
STRINGS = {"type": ["array", "null"], "items": {"type": "string"}, "uniqueItems": True}
STRING_MAP = {"type": ["object", "null"], "additionalProperties": {"type": "string"}}
SELECTOR = {"anyOf": [{"type": "string"}, STRING_MAP]}
RESOURCES = {"type": "object", "additionalProperties": {"type": ["string", "number"]}}
ANY_LIST = {"type": ["array", "null"], "items": {"type": ["object", "string"]}}


def integer(minimum: int, maximum: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "integer", "minimum": minimum}
    return out if maximum is None else {**out, "maximum": maximum}


def choice(options: tuple[str, ...]) -> dict[str, Any]:
    return {"type": "string", "enum": list(options)}


Text = Annotated[str, checked(schema.text(), STRING)]
Flag = Annotated[bool, checked(schema.boolean, BOOL)]
Duration = Annotated[float, checked(schema.duration(), DURATION)]
Wait = Annotated[float, checked(schema.duration(positive=False), DURATION)]
Share = Annotated[float, checked(schema.number(minimum=0, maximum=1), {**NUMBER, "minimum": 0, "maximum": 1})]
AtLeastOne = Annotated[int, checked(schema.integer(minimum=1), integer(1))]
Quantity = Annotated[int, checked(schema.quantity, QUANTITY)]
Strings = Annotated[tuple[str, ...], checked(schema.string_list(unique=True), STRINGS)]
Regexp = Annotated[re.Pattern[str] | None, checked(schema.regexp(empty_is_none=True), {"type": "string"})]
Overhead = Annotated[Resources | None, checked(schema.optional(schema.resources), nullable(RESOURCES))]


class Section(BaseModel):
    """A map of options: camelCase keys, none unknown; the converters hold the values' own rules."""

    model_config = ConfigDict(
        alias_generator=to_camel, extra="forbid", frozen=True, arbitrary_types_allowed=True
    )


# --- pydantic's errors as tidal's lines -------------------------------------------------------------------


def keys_of(model: type[BaseModel]) -> list[str]:
    """The keys a model takes, as a user writes them."""
    return [field.alias or name for name, field in model.model_fields.items()]


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds: itself, optional, or as the entries of a list."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def model_at(model: type[BaseModel], loc: Iterable[Any]) -> type[BaseModel] | None:
    """The model that holds the last key of ``loc`` (None when ``loc`` leaves the models)."""
    for part in loc:
        if isinstance(part, int):  # an entry of a list of models: the list's field named the model
            continue
        fields = {field.alias or name: field for name, field in model.model_fields.items()}
        inner = _inner_model(fields[part].annotation) if part in fields else None
        if inner is None:
            return None
        model = inner
    return model


def problem(*lines: str) -> PydanticCustomError:
    """A validator's failure as tidal's lines (``HERE`` in them stands for where the validated value sits)."""
    return PydanticCustomError(_ERROR_TYPE, "{lines}", {"lines": lines})


def key_path(loc: Iterable[Any]) -> str:
    """A pydantic error location as the user reads a key path: ``jobs[0].gpus``."""
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
        path = key_path((prefix, *loc) if prefix else loc)
        kind, value = problem["type"], problem["input"]
        if kind == _ERROR_TYPE:
            lines.extend(line.replace(HERE, path) for line in problem["ctx"]["lines"])
        elif kind == "extra_forbidden":
            holder = model_at(model, loc[:-1])
            known = [*keys_of(holder), *more_keys(key_path(loc[:-1]))] if holder else []
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
