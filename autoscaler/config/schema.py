"""Building blocks of configuration validation: the error type, value converters and YAML reading.

A converter takes a raw YAML value and its key path and returns the typed value, or raises
:class:`ConfigError` whose messages already start with that path, so callers can simply collect them.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NoReturn

from autoscaler.core.model import Arch, Taint
from autoscaler.core.quantity import QuantityError, to_milli
from autoscaler.core.resources import Resources

Converter = Callable[[Any, str], Any]


class ConfigError(ValueError):
    """Configuration a user got wrong: every problem found, each as ``"keyPath: message"``."""

    def __init__(self, errors: Sequence[str] | str, source: str = "") -> None:
        self.errors: list[str] = [errors] if isinstance(errors, str) else list(errors)
        self.source = source
        text = "; ".join(" ".join(e.split()) for e in self.errors)
        super().__init__(f"{source}: {text}" if source else text)


def fail(path: str, message: str) -> NoReturn:
    raise ConfigError([f"{path}: {message}"])


def show(value: Any) -> str:
    """A value as the user wrote it in YAML, short enough for a one-line message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def suggest(name: str, known: Iterable[str]) -> str | None:
    """The known name closest to a misspelt one, ignoring case, if any is close."""
    lowered = {k.lower(): k for k in known}
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[match[0]] if match else None


def unknown_keys(data: Mapping[Any, Any], known: Iterable[str], prefix: str = "") -> list[str]:
    """One error per key of ``data`` not in ``known``, each with a "did you mean" when one is close."""
    names = list(known)
    errors = []
    for key in data:
        if key in names:
            continue
        hint = suggest(str(key), names)
        errors.append(f"{prefix}{key}: unknown key" + (f" (did you mean {hint!r}?)" if hint else ""))
    return errors


def format_seconds(seconds: float) -> str:
    """Seconds in the duration syntax the configuration uses (``90`` → ``"1m30s"``)."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [
        f"{int(hours)}h" if hours else "",
        f"{int(minutes)}m" if minutes else "",
        f"{secs:g}s" if secs else "",
    ]
    return "".join(parts)


# --- durations and selectors -------------------------------------------------------------------------

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
_DURATION_PART = re.compile(rf"({_NUMBER})(ms|s|m|h)")
_DURATION = re.compile(rf"(?:{_DURATION_PART.pattern})+")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | int | float, *, field: str) -> float:
    """Parse ``"500ms"``, ``"30s"``, ``"5m"``, ``"1h30m"`` or a bare number of seconds into seconds."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        fail(field, f"{show(text)} is not a duration (e.g. 30s, 5m, 1h30m)")
    if isinstance(text, str):
        stripped = text.strip()
        if stripped.startswith("-") and _DURATION.fullmatch(stripped[1:] or "x"):
            fail(field, f"{show(text)} is below 0")
        if re.fullmatch(_NUMBER, stripped):
            return float(stripped)
        if not _DURATION.fullmatch(stripped):
            fail(field, f"{show(text)} is not a duration (e.g. 30s, 5m, 1h30m)")
        return sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(stripped))
    if not math.isfinite(text):
        fail(field, f"{show(text)} is not a duration (e.g. 30s, 5m, 1h30m)")
    if text < 0:
        fail(field, f"{show(text)} is below 0")
    return float(text)


def parse_selector_string(text: str, *, field: str) -> dict[str, str]:
    """Parse a Luna-style selector ``"key=value,key2=value2"`` into a dict; ``""`` is the empty selector."""
    if not isinstance(text, str):
        fail(field, f"{show(text)} is not a key=value,key2=value2 string")
    out: dict[str, str] = {}
    errors = []
    for part in text.split(","):
        if not part.strip():
            continue  # tolerate "a=b," and stray spaces, as Luna does
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or not key:
            errors.append(f"{field}: {part.strip()!r} is not key=value")
        elif key in out:
            errors.append(f"{field}: key {key!r} appears twice")
        else:
            out[key] = value
    if errors:
        raise ConfigError(errors)
    return out


# --- Kubernetes names ---------------------------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_RULE = "at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit"


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid Kubernetes label/annotation key, or None when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"{key!r} is not a valid key (its prefix must be a lowercase DNS subdomain)"
    if len(name) > 63 or not _NAME.fullmatch(name):
        return f"{key!r} is not a valid key (the name must be {_NAME_RULE})"
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid Kubernetes label value, or None when it is."""
    if value and (len(value) > 63 or not _NAME.fullmatch(value)):
        return f"{value!r} is not a valid label value ({_NAME_RULE}, or empty)"
    return None


# --- converters ---------------------------------------------------------------------------------------


def _in_range(value: float, path: str, minimum: float | None, maximum: float | None) -> None:
    if minimum is not None and value < minimum:
        fail(path, f"{show(value)} is below {minimum:g}")
    if maximum is not None and value > maximum:
        fail(path, f"{show(value)} is above {maximum:g}")


def optional(inner: Converter) -> Converter:
    """``null`` stays None; anything else goes through ``inner``."""
    return lambda value, path: None if value is None else inner(value, path)


def boolean(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        fail(path, f"{show(value)} is not true or false")
    return value


def text(*, pattern: str | None = None, rule: str = "", max_length: int | None = None) -> Converter:
    """A non-empty string, optionally matching ``pattern`` (``rule`` says what that pattern means)."""

    def convert(value: Any, path: str) -> str:
        if not isinstance(value, str):
            fail(path, f"{show(value)} is not a string")
        if not value:
            fail(path, "must not be empty")
        if (pattern and not re.fullmatch(pattern, value)) or (max_length and len(value) > max_length):
            fail(path, f"{show(value)} is not {rule}")
        return value

    return convert


def choice(options: Sequence[str]) -> Converter:
    """One of a fixed set of strings; a near miss gets a suggestion."""

    def convert(value: Any, path: str) -> str:
        if value not in options:
            hint = suggest(value, options) if isinstance(value, str) else None
            message = f"{show(value)} is not one of {', '.join(options)}"
            fail(path, message + (f" (did you mean {hint!r}?)" if hint else ""))
        return str(value)

    return convert


def integer(*, minimum: int | None = None, maximum: int | None = None) -> Converter:
    def convert(value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            fail(path, f"{show(value)} is not an integer")
        _in_range(value, path, minimum, maximum)
        return value

    return convert


def number(
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    positive: bool = False,
    above: float | None = None,
) -> Converter:
    """A finite number; ``positive`` and ``above`` exclude their bound, ``minimum`` and ``maximum`` include it."""

    def convert(value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            fail(path, f"{show(value)} is not a number")
        if positive and value <= 0:
            fail(path, f"{show(value)} must be above 0")
        if above is not None and value <= above:
            fail(path, f"{show(value)} must be above {above:g}")
        _in_range(value, path, minimum, maximum)
        return float(value)

    return convert


def duration(*, positive: bool = True, minimum: float | None = None) -> Converter:
    def convert(value: Any, path: str) -> float:
        seconds = parse_duration(value, field=path)
        if positive and seconds <= 0:
            fail(path, f"{show(value)} must be longer than 0s")
        if minimum is not None and seconds < minimum:
            fail(path, f"{show(value)} is below {format_seconds(minimum)}")
        return seconds

    return convert


def quantity(value: Any, path: str) -> int:
    """A Kubernetes quantity in milli-units, never negative."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        fail(path, f"{show(value)} is not a quantity (e.g. 500m, 2, 6Gi)")
    try:
        milli = to_milli(value, field=path)
    except QuantityError as err:
        raise ConfigError([str(err)]) from None
    if milli < 0:
        fail(path, f"{show(value)} is below 0")
    return milli


def regexp(*, empty_is_none: bool = False) -> Converter:
    def convert(value: Any, path: str) -> re.Pattern[str] | None:
        if not isinstance(value, str):
            fail(path, f"{show(value)} is not a regexp string")
        if empty_is_none and not value:
            return None
        try:
            return re.compile(value)
        except re.error as err:
            fail(path, f"invalid regexp {value!r}: {err}")

    return convert


def string_list(*, item: Converter | None = None, non_empty: bool = False, unique: bool = False) -> Converter:
    """A YAML list of strings (null is the empty list), each checked by ``item``."""

    def convert(value: Any, path: str) -> tuple[str, ...]:
        if value is None:
            value = []
        if not isinstance(value, list):
            fail(path, f"{show(value)} is not a list (e.g. [a, b])")
        out: list[str] = []
        errors: list[str] = []
        for i, raw in enumerate(value):
            try:
                if not isinstance(raw, str) or not raw:
                    fail(f"{path}[{i}]", f"{show(raw)} is not a non-empty string")
                checked = item(raw, f"{path}[{i}]") if item else raw
            except ConfigError as err:
                errors.extend(err.errors)
                continue
            if unique and checked in out:
                errors.append(f"{path}: {checked!r} is listed twice")
            out.append(checked)
        if non_empty and not value:
            errors.append(f"{path}: must list at least one item")
        if errors:
            raise ConfigError(errors)
        return tuple(out)

    return convert


def number_map(*, item: Converter) -> Converter:
    """A YAML map of names (non-empty strings) to numbers, each checked by ``item``; null is the empty map."""

    def convert(value: Any, path: str) -> Mapping[str, float]:
        if value is None:
            return MappingProxyType({})
        if not isinstance(value, Mapping):
            fail(path, f"{show(value)} is not a map (e.g. {{research: 20.0}})")
        out: dict[str, float] = {}
        errors: list[str] = []
        for key, raw in value.items():
            if not isinstance(key, str) or not key:
                errors.append(f"{path}: key {show(key)} is not a non-empty string")
                continue
            try:
                out[key] = item(raw, f"{path}.{key}")
            except ConfigError as err:
                errors.extend(err.errors)
        if errors:
            raise ConfigError(errors)
        return MappingProxyType(out)

    return convert


def architecture(value: str, path: str) -> str:
    try:
        return Arch.parse(value).value
    except ValueError:
        fail(path, f"{show(value)} is not one of amd64, arm64 (x86_64 and aarch64 are accepted too)")


def string_map(*, label_syntax: bool, label_values: bool = False, selector: bool = False) -> Converter:
    """A map of strings to strings; with ``selector``, also a ``"k=v,k2=v2"`` string.

    ``label_syntax`` checks keys as Kubernetes label/annotation keys, ``label_values`` values as label values.
    """

    def convert(value: Any, path: str) -> Mapping[str, str]:
        if value is None:
            value = {}
        if selector and isinstance(value, str):
            value = parse_selector_string(value, field=path)
        if not isinstance(value, Mapping):
            forms = "a key=value,key2=value2 string or a map" if selector else "a map"
            fail(path, f"{show(value)} is not {forms}")
        errors = []
        for key, val in value.items():
            if not isinstance(key, str) or not key:
                errors.append(f"{path}: {show(key)} is not a non-empty string key")
            elif label_syntax and (problem := label_key_problem(key)):
                errors.append(f"{path}: {problem}")
            elif not isinstance(val, str):
                errors.append(f"{path}.{key}: {show(val)} is not a string (quote it)")
            elif label_values and (problem := label_value_problem(val)):
                errors.append(f"{path}.{key}: {problem}")
        if errors:
            raise ConfigError(errors)
        return MappingProxyType(dict(value))

    return convert


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def taint(value: Any, path: str) -> Taint:
    """``"key=value:Effect"``, ``"key:Effect"`` or a ``{key, value, effect}`` map."""
    if isinstance(value, Mapping):
        extra = unknown_keys(value, ("key", "value", "effect"), f"{path}.")
        if extra:
            raise ConfigError(extra)
        key, val, effect = value.get("key"), value.get("value", ""), value.get("effect")
    elif isinstance(value, str) and ":" in value:
        head, _, effect = value.rpartition(":")
        key, _, val = head.partition("=")
    else:
        fail(path, f"{show(value)} is not key=value:Effect or key:Effect")
    if not isinstance(key, str) or not isinstance(val, str):
        fail(path, f"{show(value)} is not key=value:Effect or key:Effect")
    problem = label_key_problem(key) or label_value_problem(val)
    if problem:
        fail(path, problem)
    if effect not in TAINT_EFFECTS:
        fail(path, f"effect {show(effect)} is not one of {', '.join(TAINT_EFFECTS)}")
    return Taint(key, val, effect)


def taint_list(value: Any, path: str) -> tuple[Taint, ...]:
    if value is None:
        value = []
    if not isinstance(value, list):
        fail(path, f"{show(value)} is not a list of taints (e.g. [gpu=true:NoSchedule])")
    out, errors = [], []
    for i, raw in enumerate(value):
        try:
            out.append(taint(raw, f"{path}[{i}]"))
        except ConfigError as err:
            errors.extend(err.errors)
    if errors:
        raise ConfigError(errors)
    return tuple(out)


def resources(value: Any, path: str) -> Resources:
    if not isinstance(value, Mapping):
        fail(path, f"{show(value)} is not a resource map (e.g. {{cpu: 200m, memory: 256Mi}})")
    try:
        return Resources.parse(value, field=path)
    except QuantityError as err:
        raise ConfigError([str(err)]) from None


def address(value: Any, path: str) -> str:
    """``host:port`` as Go and Python servers take it: ``:8080``, ``0.0.0.0:8080``, ``[::1]:9090``."""
    if not isinstance(value, str):
        fail(path, f"{show(value)} is not a host:port string")
    host, sep, port = value.rpartition(":")
    bad_host = ":" in host and not (host.startswith("[") and host.endswith("]"))
    if not sep or bad_host or not port.isdigit() or int(port) > 65535:
        fail(path, f"{show(value)} is not host:port with a port from 0 to 65535 (e.g. :8080)")
    return value


def raw_map(value: Any, path: str) -> Mapping[str, Any]:
    """A section checked elsewhere (by a provider); only its being a map is checked here."""
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping):
        fail(path, f"{show(value)} is not a map")
    return MappingProxyType(dict(value))


# --- YAML ---------------------------------------------------------------------------------------------


def load_yaml(document: str, source: str, *, own: bool = False) -> Any:
    """Parse one YAML document; a syntax error becomes one ``source:line:column: problem`` line. ``own``: a
    file tidal ships (its defaults), read with libyaml."""
    # PyYAML is imported with the first document read: a command that reads none (tidal plan on a JSON
    # snapshot without --config) does without it.
    from autoscaler.config.yaml_files import load_yaml as load

    return load(document, source, own=own)
