"""The part of CEL that DRA device selectors are written in, evaluated against a device tidal could launch.

A DeviceClass or a claim's request selects devices with CEL expressions over ``device.driver``,
``device.attributes[domain].<name>`` and ``device.capacity[domain].<name>`` (Kubernetes
``resource.k8s.io/v1``, ``CELDeviceSelector``). tidal evaluates what NVIDIA's DRA driver documents and users
write: ``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=``, ``&&``, ``||``, ``!``, ``in`` a list, parentheses,
string ``matches`` / ``startsWith`` / ``endsWith`` / ``contains`` / ``lowerAscii`` / ``upperAscii``,
``quantity("40Gi")`` with ``compareTo`` / ``isGreaterThan`` / ``isLessThan`` / ``asInteger``, and
``semver("8.0.0")`` with the same comparisons. Anything else (arithmetic, macros, ``has()``, the ternary
operator, an attribute tidal does not know for a device that does not exist yet) is :class:`Unsupported`
with the reason: a selector tidal cannot evaluate never turns into a guess.

``&&`` and ``||`` absorb what they can as CEL does: ``false && <unsupported>`` is false.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

from autoscaler.core.cel import NotEvaluable, parse
from autoscaler.core.quantity import QuantityError, parse_quantity

__all__ = ["Alternatives", "AttributeValue", "Unsupported", "Version", "check", "evaluate", "evaluate_all"]


@dataclass(frozen=True, slots=True)
class Unsupported:
    """A selector tidal cannot evaluate for this device, and why."""

    reason: str

    def __bool__(self) -> bool:  # never mistaken for a match
        return False


@dataclass(frozen=True, slots=True, order=True)
class Version:
    """A semantic version attribute (``cudaComputeCapability``, ``driverVersion``): ``Version.parse("8.0.0")``."""

    major: int
    minor: int
    patch: int
    # Empty sorts after any pre-release, as semver orders them ("1.0.0-rc1" < "1.0.0").
    release: tuple[int, str] = (1, "")

    @classmethod
    def parse(cls, text: str) -> Version:
        """Parse ``major.minor.patch[-pre][+build]``; raise ValueError otherwise."""
        match = re.fullmatch(
            r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(?:-([0-9A-Za-z.-]+))?(?:\+.*)?", text
        )
        if match is None:
            raise ValueError(f"{text!r} is not a semantic version (major.minor.patch)")
        major, minor, patch, pre = match.groups()
        return cls(int(major), int(minor), int(patch), (0, pre) if pre else (1, ""))

    def __str__(self) -> str:
        pre = f"-{self.release[1]}" if self.release[0] == 0 else ""
        return f"{self.major}.{self.minor}.{self.patch}{pre}"


@dataclass(frozen=True, slots=True)
class Alternatives:
    """An attribute whose value tidal knows only as one of several (an A100 80GB may be SXM or PCIe)."""

    values: tuple[Any, ...]


AttributeValue = str | int | bool | Version | Alternatives
Attributes = Mapping[str, Mapping[str, AttributeValue]]  # domain → name → value
Capacity = Mapping[str, Mapping[str, "Fraction | int | Alternatives"]]  # domain → name → amount


@lru_cache(maxsize=1024)
def _parse(expr: str) -> tuple[Any, ...] | Unsupported:
    try:
        return parse(expr)
    except NotEvaluable as err:
        return Unsupported(f"selector {expr!r}: {err} is outside the CEL subset tidal evaluates")


def check(expr: str) -> Unsupported | None:
    """Whether ``expr`` is in the subset (the syntax alone; an attribute may still be unknown for a device)."""
    parsed = _parse(expr)
    return parsed if isinstance(parsed, Unsupported) else None


# --- evaluation --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Map:
    """``device.attributes[domain]`` or ``device.capacity[domain]``."""

    what: str
    domain: str
    values: Mapping[str, Any]

    def get(self, name: str) -> Any:
        if name not in self.values:
            raise NotEvaluable(f"{self.what} {self.domain}/{name} is not known for this device")
        value = self.values[name]
        # Capacities are quantities in CEL, whichever way the caller wrote the amount.
        return Fraction(value) if self.what == "capacity" and type(value) is int else value


@dataclass(frozen=True, slots=True)
class _Domains:
    """``device.attributes`` or ``device.capacity``: indexed by a domain, it gives that domain's map."""

    what: str
    values: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class _Device:
    driver: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, Any]]


_ORDERED = (int, str)
_UNLIKE_RE2 = re.compile(r"\(\?[=!<]|\\[1-9]|\\[pP]\{")


def _regex(pattern: str) -> re.Pattern[str]:
    # CEL's matches() is RE2; refuse what RE2 and Python's re read differently (lookaround, backreferences,
    # Unicode classes) rather than risk a different answer.
    if _UNLIKE_RE2.search(pattern):
        raise NotEvaluable(f"the regular expression {pattern!r} (lookaround, backreference or \\p class)")
    try:
        return re.compile(pattern)
    except re.error as err:
        raise NotEvaluable(f"the regular expression {pattern!r} ({err})") from None


def _compare(left: Any, right: Any) -> int:
    if type(left) is not type(right) or not isinstance(left, (*_ORDERED, Fraction, Version)):
        raise NotEvaluable(f"comparing {type(left).__name__} with {type(right).__name__}")
    order: int = (left > right) - (left < right)
    return order


def _call(target: Any, name: str, args: list[Any]) -> Any:
    methods: dict[str, Callable[..., Any]]
    if isinstance(target, str):
        methods = {
            "matches": lambda p: _regex(p).search(target) is not None,
            "startsWith": target.startswith,
            "endsWith": target.endswith,
            "contains": lambda s: s in target,
            "lowerAscii": lambda: "".join(c.lower() if c.isascii() else c for c in target),
            "upperAscii": lambda: "".join(c.upper() if c.isascii() else c for c in target),
        }
        if name in methods and all(isinstance(a, str) for a in args):
            return _apply(methods[name], name, args)
    elif isinstance(target, (Fraction, Version)):
        kind = type(target)
        methods = {
            "compareTo": lambda other: _compare(target, other),
            "isGreaterThan": lambda other: _compare(target, other) > 0,
            "isLessThan": lambda other: _compare(target, other) < 0,
        }
        if isinstance(target, Fraction) and target.denominator == 1:
            whole = int(target)
            methods["asInteger"] = lambda: whole
        if name in methods and all(type(a) is kind for a in args):
            return _apply(methods[name], name, args)
    raise NotEvaluable(f"the method {name}() on {type(target).__name__}")


def _apply(method: Callable[..., Any], name: str, args: list[Any]) -> Any:
    try:
        return method(*args)
    except TypeError:  # the wrong number of arguments; CEL would not have compiled the expression
        raise NotEvaluable(f"{name}() with {len(args)} argument(s)") from None


def _function(name: str, args: list[Any]) -> Any:
    if len(args) == 1 and isinstance(args[0], str):
        if name == "quantity":
            try:
                return parse_quantity(args[0])
            except QuantityError as err:
                raise NotEvaluable(f"quantity({args[0]!r}) ({err})") from None
        if name == "semver":
            try:
                return Version.parse(args[0])
            except ValueError as err:
                raise NotEvaluable(f"semver({args[0]!r}) ({err})") from None
    raise NotEvaluable(f"the function {name}()")


def _eval(node: tuple[Any, ...], device: _Device) -> Any:
    tag = node[0]
    if tag == "lit":
        return node[1]
    if tag == "device":
        return device
    if tag in ("&&", "||"):
        stop = tag == "||"  # the value that decides the result on its own
        first_error: NotEvaluable | None = None
        for side in node[1:]:
            try:
                value = _eval(side, device)
            except NotEvaluable as err:
                first_error = first_error or err
                continue
            if type(value) is not bool:
                raise NotEvaluable(f"{tag} on a {type(value).__name__}")
            if value is stop:
                return stop
        if first_error is not None:
            raise first_error
        return not stop
    if tag == "not":
        value = _eval(node[1], device)
        if type(value) is not bool:
            raise NotEvaluable(f"! on a {type(value).__name__}")
        return not value
    if tag == "rel":
        return _relation(node[1], _eval(node[2], device), _eval(node[3], device))
    if tag == "list":
        return [_eval(item, device) for item in node[1]]
    if tag == "func":
        return _function(node[1], [_eval(a, device) for a in node[2]])
    target = _eval(node[1], device)
    if tag == "call":
        return _call(target, node[2], [_eval(a, device) for a in node[3]])
    key = node[2] if tag == "field" else _eval(node[2], device)
    return _select(target, key)


def _select(target: Any, key: Any) -> Any:
    if isinstance(target, _Device) and key == "driver":
        return target.driver
    if isinstance(target, _Device) and key in ("attributes", "capacity"):
        return _Domains(key, target.attributes if key == "attributes" else target.capacity)
    if isinstance(target, _Domains) and isinstance(key, str):
        what = "attribute" if target.what == "attributes" else "capacity"
        return _Map(what, key, target.values.get(key, {}))
    if isinstance(target, _Map) and isinstance(key, str):
        return target.get(key)
    raise NotEvaluable(f"the field {key!r}")


def _relation(op: str, left: Any, right: Any) -> bool:
    if op == "in":
        if isinstance(right, list):
            return any(type(item) is type(left) and item == left for item in right)
        if isinstance(right, _Map) and isinstance(left, str):
            right.get(left)  # known: it exists; unknown: whether it exists is not known either
            return True
        raise NotEvaluable(f"in on a {type(right).__name__.strip('_')}")
    if isinstance(left, (Fraction, Version)) or isinstance(right, (Fraction, Version)):
        # CEL has no operators for quantities and versions, only their methods: a real selector cannot say this.
        raise NotEvaluable(f"{op} on a quantity or version (CEL compares them with compareTo())")
    if op in ("==", "!="):
        if type(left) is not type(right):
            raise NotEvaluable(f"comparing {type(left).__name__} with {type(right).__name__}")
        equal: bool = left == right
        return equal == (op == "==")
    sign = _compare(left, right)
    return {"<": sign < 0, "<=": sign <= 0, ">": sign > 0, ">=": sign >= 0}[op]


def _choices(values: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, tuple[Any, ...]]]:
    return [
        (domain, name, value.values)
        for domain, names in sorted(values.items())
        for name, value in sorted(names.items())
        if isinstance(value, Alternatives)
    ]


def _fixed(
    values: Mapping[str, Mapping[str, Any]], chosen: Mapping[tuple[str, str], Any]
) -> dict[str, dict[str, Any]]:
    return {d: {n: chosen.get((d, n), v) for n, v in names.items()} for d, names in values.items()}


def evaluate(
    expr: str,
    attributes: Attributes,
    capacity: Capacity | None = None,
    *,
    driver: str = "gpu.nvidia.com",
) -> bool | Unsupported:
    """Whether a device with these attributes and capacity (``{domain: {name: value}}``; capacity amounts as
    exact numbers) matches the selector ``expr``, or :class:`Unsupported` with the reason.

    An attribute given as :class:`Alternatives` is tried with each value: when the answers differ the result is
    Unsupported, naming the attribute, never one of the answers.
    """
    parsed = _parse(expr)
    if isinstance(parsed, Unsupported):
        return parsed
    capacity = capacity or {}
    attr_choices, cap_choices = _choices(attributes), _choices(capacity)
    results: dict[bool, bool] = {}
    for attr_combo in itertools.product(*(values for _, _, values in attr_choices)):
        attrs = _fixed(attributes, {(d, n): v for (d, n, _), v in zip(attr_choices, attr_combo, strict=True)})
        for cap_combo in itertools.product(*(values for _, _, values in cap_choices)):
            caps = _fixed(capacity, {(d, n): v for (d, n, _), v in zip(cap_choices, cap_combo, strict=True)})
            device = _Device(driver, attrs, caps)
            try:
                value = _eval(parsed, device)
            except NotEvaluable as err:
                return Unsupported(f"selector {expr!r}: {err}")
            if type(value) is not bool:
                return Unsupported(f"selector {expr!r}: gives a {type(value).__name__}, not true or false")
            results[value] = True
    if len(results) > 1:
        named = ", ".join(f"{d}/{n}" for d, n, _ in [*attr_choices, *cap_choices])
        return Unsupported(
            f"selector {expr!r}: the answer depends on {named}, which tidal knows only as one of several values"
        )
    return next(iter(results))


def evaluate_all(
    exprs: Sequence[str],
    attributes: Attributes,
    capacity: Capacity | None = None,
    *,
    driver: str = "gpu.nvidia.com",
) -> bool | Unsupported:
    """Every selector matches (as a DeviceClass's and a request's selectors combine): False as soon as one does
    not, else the first Unsupported, else True."""
    unsupported: Unsupported | None = None
    for expr in exprs:
        result = evaluate(expr, attributes, capacity, driver=driver)
        if isinstance(result, Unsupported):
            if unsupported is None:
                unsupported = result
        elif not result:
            return False
    return unsupported if unsupported is not None else True  # an Unsupported is falsy: no `or` here
