"""Resources: an immutable bag of resource amounts in integer milli-units.

``cpu``, ``memory``, ``ephemeral-storage``, ``pods`` and every extended resource (``nvidia.com/gpu``,
``amd.com/gpu``, hugepages, …) are kept the same way, so arithmetic is exact and comparison is per key.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, ValuesView

from autoscaler.core.quantity import QuantityError, QuantityMemo, to_milli

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
GPU_RESOURCES = (NVIDIA_GPU, AMD_GPU)
MILLI = 1000
MIB = 2**20 * MILLI
GIB = 2**30 * MILLI


def is_extended(name: str) -> bool:
    """An extended resource (``nvidia.com/gpu``): a domain-prefixed name outside ``kubernetes.io/``.

    Kubernetes only accepts whole amounts of these.
    """
    return "/" in name and "kubernetes.io/" not in name


class Resources(Mapping[str, int]):
    """Resource name → amount in milli-units. Zero entries are dropped so equal bags compare equal."""

    __slots__ = ("_hash", "_values")

    def __init__(self, values: Mapping[str, int] | Iterable[tuple[str, int]] = ()) -> None:
        items = values.items() if type(values) is dict or isinstance(values, Mapping) else values
        self._values: dict[str, int] = {k: v for k, v in items if v}
        self._hash: int | None = None

    @classmethod
    def total(cls, bags: Iterable[Resources], *, each: Mapping[str, int] | None = None) -> Resources:
        """Sum of many bags (plus ``each`` once per bag) without building every partial sum."""
        acc: dict[str, int] = {}
        n = 0
        for bag in bags:
            n += 1
            for k, v in bag._values.items():
                acc[k] = acc.get(k, 0) + v
        for k, v in (each or {}).items():
            acc[k] = acc.get(k, 0) + v * n
        return cls(acc)

    @classmethod
    def parse(
        cls, spec: Mapping[str, object] | None, *, field: str = "resources", memo: QuantityMemo | None = None
    ) -> Resources:
        """Build from a Kubernetes resource map (``{"cpu": "500m", "memory": "1Gi"}``); raise on garbage.
        ``memo`` is the decoder's, kept across the objects it reads."""
        if not spec:
            return EMPTY
        key: tuple[tuple[object, object], ...] | None = None
        # The same map read before is the same (immutable) bag; only maps read without error are kept, and only
        # maps of strings, as the API server writes quantities (1 == True would let a boolean pass).
        if (
            memo is not None
            and cls is Resources
            and type(spec) is dict
            and all(type(v) is str for v in spec.values())
        ):
            key = tuple(spec.items())
            found = memo.maps.get(key)
            if type(found) is Resources:
                return found
        if not isinstance(spec, Mapping):
            raise QuantityError(f"{field}: expected a map of resource names to quantities, got {spec!r}")
        out: dict[str, int] = {}
        for name, raw in spec.items():
            if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
                raise QuantityError(f"{field}.{name}: {raw!r} is not a quantity")
            amount = to_milli(raw, field=f"{field}.{name}", memo=memo)
            if amount < 0:
                raise QuantityError(f"{field}.{name}: {raw!r} is negative")
            if amount % MILLI and is_extended(name):
                # As the API server: a device (a GPU, a NIC) is never split between containers.
                raise QuantityError(
                    f"{field}.{name}: {raw!r} is not a whole number (extended resources are whole devices)"
                )
            out[str(name)] = amount
        bag = cls(out)
        if key is not None and memo is not None:
            memo.keep_map(key, bag)
        return bag

    @classmethod
    def of(
        cls, *, cpu: float = 0, memory_mib: float = 0, gpu: int = 0, pods: int = 0, **extra: int
    ) -> Resources:
        """Convenience constructor in human units (cores, MiB, GPUs, pods)."""
        values = {
            CPU: round(cpu * MILLI),
            MEMORY: round(memory_mib * MIB),
            NVIDIA_GPU: gpu * MILLI,
            PODS: pods * MILLI,
        }
        values.update({k.replace("__", "/").replace("_", "-"): v * MILLI for k, v in extra.items()})
        return cls(values)

    def __getitem__(self, key: str) -> int:
        return self._values.get(key, 0)

    def get(self, key: str, default: int = 0) -> int:  # type: ignore[override]
        return self._values.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._values.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._values == other._values
        if isinstance(other, Mapping):
            return self._values == {k: v for k, v in other.items() if v}
        return NotImplemented

    def __repr__(self) -> str:
        return f"Resources({self._values!r})"

    def items(self) -> ItemsView[str, int]:
        # The dict's own view: iterating a Mapping's generic view costs a lookup per key.
        return self._values.items()

    def keys(self) -> KeysView[str]:
        return self._values.keys()

    def values(self) -> ValuesView[int]:
        return self._values.values()

    def __add__(self, other: Mapping[str, int]) -> Resources:
        out = dict(self._values)
        for k, v in other.items():
            out[k] = out.get(k, 0) + v
        return Resources(out)

    def __sub__(self, other: Mapping[str, int]) -> Resources:
        out = dict(self._values)
        for k, v in other.items():
            out[k] = out.get(k, 0) - v
        return Resources(out)

    def remaining(self, bags: Iterable[Resources], *, each: Mapping[str, int] | None = None) -> Resources:
        """This bag less the sum of ``bags`` (and ``each`` once per bag), without building the sum: what a
        node's pods leave of its allocatable."""
        out = dict(self._values)
        n = 0
        for bag in bags:
            n += 1
            for k, v in bag._values.items():
                out[k] = out.get(k, 0) - v
        if n:
            for k, v in (each or {}).items():
                out[k] = out.get(k, 0) - v * n
        return Resources(out)

    def scaled(self, factor: int) -> Resources:
        """Every amount multiplied by an integer factor (``n`` identical pods)."""
        return Resources({k: v * factor for k, v in self._values.items()})

    def maximum(self, other: Mapping[str, int]) -> Resources:
        """Per-key maximum (used for init containers)."""
        out = dict(self._values)
        for k, v in other.items():
            if v > out.get(k, 0):
                out[k] = v
        return Resources(out)

    def fits_in(self, capacity: Mapping[str, int]) -> bool:
        """True when every requested amount is available in ``capacity``."""
        return all(v <= capacity.get(k, 0) for k, v in self._values.items())

    def shortfall(self, capacity: Mapping[str, int]) -> list[str]:
        """Names of the resources that do not fit, in a stable order."""
        return sorted(k for k, v in self._values.items() if v > capacity.get(k, 0))

    def times_fits_in(self, capacity: Mapping[str, int]) -> int:
        """How many copies of this request fit in ``capacity`` (a very large number for an empty request)."""
        best = 1 << 30
        for k, v in self._values.items():
            if v > 0:
                n = capacity.get(k, 0) // v
                if n < best:
                    best = n
                    if best == 0:
                        return 0
        return best

    def times_fit(self, capacity: Mapping[str, int], used: Mapping[str, int]) -> int:
        """How many copies of this request fit in ``capacity`` minus ``used`` (without building the difference)."""
        best = 1 << 30
        for k, v in self._values.items():
            if v > 0:
                n = (capacity.get(k, 0) - used.get(k, 0)) // v
                if n < best:
                    best = n
                    if best <= 0:
                        return 0
        return best

    def non_negative(self) -> Resources:
        """Amounts below zero clamped to zero."""
        return Resources({k: v for k, v in self._values.items() if v > 0})

    @property
    def cpu(self) -> int:
        return self._values.get(CPU, 0)

    @property
    def memory(self) -> int:
        return self._values.get(MEMORY, 0)

    @property
    def gpus(self) -> int:
        """Whole GPU devices of any vendor."""
        v = self._values
        return (v.get(NVIDIA_GPU, 0) + v.get(AMD_GPU, 0)) // MILLI

    def as_dict(self) -> dict[str, int]:
        return dict(self._values)


EMPTY = Resources()
