"""Reading fields of Kubernetes JSON objects: typed accessors whose errors name the field path and the value.

Every decoder (``convert``, ``scheduling``) builds on these. The checks are ``type(x) is dict`` tests on the
way and, for anything rarer, a path added in the ``except`` branch: decoding 100,000 pods stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from autoscaler.core.quantity import QuantityError
from autoscaler.core.timestamps import epoch
from autoscaler.core.timestamps import parse_time as parse_time  # decoders and the lease read it from here

T = TypeVar("T")


class ConversionError(ValueError):
    """A Kubernetes object that cannot be understood; the message names the object, field and value."""


class FieldError(ValueError):
    """One field of an object is wrong: ``path`` (``spec.tolerations[0]``) and what is wrong with it."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path = path
        self.problem = problem

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}" if self.path else self.problem

    def under(self, prefix: str) -> FieldError:
        """The same error seen from the object that contains the field (``prefix`` is its path)."""
        if not self.path:
            return FieldError(prefix, self.problem)
        sep = "" if self.path.startswith("[") else "."
        return FieldError(f"{prefix}{sep}{self.path}", self.problem)


def got(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- time -------------------------------------------------------------------------------------------


def parse_timestamp(value: object, field: str) -> float | None:
    """A timestamp field of an object: ``None`` when absent; anything else but RFC 3339 is a FieldError."""
    if value is None or value == "":
        return None
    if type(value) is str:
        seconds = epoch(value)
        if seconds is not None:
            return seconds
    raise FieldError(field, f"{got(value)} is not an RFC 3339 time (e.g. 2026-11-20T10:00:00Z)")


# --- fields -----------------------------------------------------------------------------------------


def field_map(obj: Mapping[str, Any], key: str, where: str = "") -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if type(value) is not dict and not isinstance(value, Mapping):
        raise FieldError(where + key, f"expected a map, got {got(value)}")
    return value


def field_list(obj: Mapping[str, Any], key: str, where: str = "") -> Sequence[Any]:
    value = obj.get(key)
    if value is None:
        return ()
    if type(value) is not list:
        raise FieldError(where + key, f"expected a list, got {got(value)}")
    return value


def field_maps(obj: Mapping[str, Any], key: str, where: str = "") -> Sequence[Mapping[str, Any]]:
    """A list whose entries are all maps (containers, tolerations, conditions, …)."""
    value = obj.get(key)
    if value is None:
        return ()
    if type(value) is list:
        for entry in value:
            if type(entry) is not dict:
                return checked_maps(value, key, where)
        return value  # the JSON case, checked with one type test per entry
    return checked_maps(value, key, where)


def checked_maps(value: object, key: str, where: str) -> Sequence[Mapping[str, Any]]:
    if type(value) is not list:
        raise FieldError(where + key, f"expected a list, got {got(value)}")
    for i, entry in enumerate(value):
        if not isinstance(entry, Mapping):
            raise FieldError(f"{where}{key}[{i}]", f"expected a map, got {got(entry)}")
    return value


_STRINGS = frozenset({str})


def str_map(obj: Mapping[str, Any], key: str, where: str = "") -> Mapping[str, str]:
    raw = field_map(obj, key, where)
    if type(raw) is dict and set(map(type, raw.values())) <= _STRINGS:
        return raw  # JSON maps of strings are used as they are: nothing in tidal mutates them
    out: dict[str, str] = {}
    for k, v in raw.items():
        # The API server refuses a number or a bool here (`tier: 1` in YAML), so tidal does not guess a string.
        if v is not None and type(v) is not str:
            raise FieldError(f"{where}{key}.{k}", f"expected a string, got {got(v)}")
        out[str(k)] = v or ""
    return out


def string(obj: Mapping[str, Any], key: str, default: str = "", where: str = "") -> str:
    """A string field; absent or empty is ``default``, any other type a FieldError (the API server refuses a
    number or a bool where a string goes, so tidal does not guess one)."""
    value = obj.get(key)
    if type(value) is str:
        return value or default
    if value is None:
        return default
    raise FieldError(where + key, f"expected a string, got {got(value)}")


def integer(obj: Mapping[str, Any], key: str, default: int, where: str = "") -> int:
    value = obj.get(key)
    if type(value) is int:
        return value
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if type(value) is str:
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise FieldError(where + key, f"expected an integer, got {got(value)}")


def boolean(obj: Mapping[str, Any], key: str, where: str = "") -> bool:
    value = obj.get(key)
    if value is None:
        return False
    if type(value) is not bool:  # bool("false") is True
        raise FieldError(where + key, f"expected true or false, got {got(value)}")
    return value


def object_name(meta: Mapping[str, Any]) -> str:
    name = meta.get("name")
    if type(name) is not str or not name:
        raise FieldError("metadata.name", "missing" if not name else f"expected a string, got {got(name)}")
    return name


def identify(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    kind = obj.get("kind", "object") if isinstance(obj, Mapping) else "object"
    name = meta.get("name", "?") if isinstance(meta, Mapping) else "?"
    ns = meta.get("namespace") if isinstance(meta, Mapping) else None
    return f"{kind} {ns}/{name}" if ns and type(ns) is str else f"{kind} {name}"


def guard(obj: Mapping[str, Any], fn: Callable[..., T], *args: Any) -> T:
    """``fn(obj, *args)``, any error in reading the object raised as one ConversionError naming it."""
    if type(obj) is not dict and not isinstance(obj, Mapping):
        raise ConversionError(f"expected a Kubernetes object (a map), got {got(obj)}")
    try:
        return fn(obj, *args)
    except (FieldError, QuantityError) as err:
        raise ConversionError(f"{identify(obj)}: {err}") from None
    except KeyError as err:  # not expected: every field above is checked; keep the message useful anyway
        raise ConversionError(f"{identify(obj)}: field {err.args[0]!r} is missing") from None
    except (ValueError, TypeError, AttributeError) as err:
        raise ConversionError(f"{identify(obj)}: malformed object ({err})") from None
