"""What can be launched in each configured zone: machine types (with built-in GPUs) and N1 + attached GPUs.

Read from ``machineTypes.list`` and ``acceleratorTypes.list`` per zone. Shared-core and deprecated machine
types are left out: a Kubernetes node needs whole vCPUs, and a deprecated type may vanish under a launch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from google.cloud import compute_v1

from autoscaler.core.model import Arch
from providers.gcp.clients import ClientFactory
from providers.gcp.errors import CALL_ERRORS, api_error
from providers.gcp.gpus import Accelerator, accelerator, attach_limits, attached_name

__all__ = ["Shape", "fetch_shapes", "machine_family"]

_ARM_FAMILIES = ("t2a", "c4a", "n4a")
_GONE = ("DEPRECATED", "OBSOLETE", "DELETED")
PAGE_SIZE = 500


@dataclass(frozen=True, slots=True)
class Shape:
    """One launchable machine in one zone: a machine type, possibly with attached GPUs."""

    name: str
    machine_type: str
    zone: str
    vcpu: int
    memory_mib: int
    arch: Arch = Arch.AMD64
    gpu: Accelerator | None = None
    gpu_count: int = 0
    attached: bool = False

    @property
    def family(self) -> str:
        """``n1`` of ``n1-standard-8``."""
        return machine_family(self.machine_type)

    @property
    def memory_gib(self) -> float:
        """Memory as GCE prices it (its "GB" are GiB)."""
        return self.memory_mib / 1024


def machine_family(machine_type: str) -> str:
    """The family prefix of a machine type name."""
    return machine_type.split("-", 1)[0]


def _arch(mt: compute_v1.MachineType) -> Arch:
    declared = mt.architecture if "architecture" in mt else ""
    if declared.upper() == "ARM64" or machine_family(mt.name) in _ARM_FAMILIES:
        return Arch.ARM64
    return Arch.AMD64


def _usable(mt: compute_v1.MachineType) -> bool:
    if mt.is_shared_cpu or mt.guest_cpus < 1:
        return False
    return not ("deprecated" in mt and mt.deprecated.state in _GONE)


def _machine_shape(mt: compute_v1.MachineType, zone: str) -> Shape | None:
    gpu, count = None, 0
    for acc in mt.accelerators:
        found = accelerator(acc.guest_accelerator_type)
        if found is not None:
            gpu, count = found, acc.guest_accelerator_count
            break
    else:
        if mt.accelerators:
            return None  # an accelerator tidal cannot describe to the planner (TPU, unknown vendor)
    return Shape(
        name=mt.name,
        machine_type=mt.name,
        zone=zone,
        vcpu=mt.guest_cpus,
        memory_mib=mt.memory_mb,
        arch=_arch(mt),
        gpu=gpu,
        gpu_count=count,
    )


def attached_shapes(
    machines: Sequence[Shape], accelerators: Iterable[compute_v1.AcceleratorType]
) -> list[Shape]:
    """Every valid (GPU-less machine, attachable GPU, count) in one zone, within GCE's per-count limits."""
    out = []
    for acc in accelerators:
        gpu = accelerator(acc.name)
        if gpu is None:
            continue
        for machine in machines:
            if machine.gpu is not None:
                continue
            for limit in attach_limits(machine.family, acc.name):
                if (
                    limit.count <= acc.maximum_cards_per_instance
                    and machine.vcpu <= limit.max_vcpu
                    and machine.memory_gib <= limit.max_memory_gb
                ):
                    out.append(
                        Shape(
                            name=attached_name(machine.machine_type, acc.name, limit.count),
                            machine_type=machine.machine_type,
                            zone=machine.zone,
                            vcpu=machine.vcpu,
                            memory_mib=machine.memory_mib,
                            arch=machine.arch,
                            gpu=gpu,
                            gpu_count=limit.count,
                            attached=True,
                        )
                    )
    return out


def fetch_zones(factory: ClientFactory, project: str, region: str) -> tuple[str, ...]:
    """The zones of ``region`` that are up, for listing offerings when no zones are configured
    (ProviderError when GCE fails)."""
    try:
        found = factory.compute().regions.get(
            request=compute_v1.GetRegionRequest(project=project, region=region),
            retry=factory.retry(),
            timeout=factory.timeout,
        )
    except CALL_ERRORS as err:
        raise api_error(err, f"listing the zones of region {region}") from None
    return tuple(sorted(url.rsplit("/", 1)[-1] for url in found.zones))


def fetch_shapes(factory: ClientFactory, project: str, zones: Sequence[str]) -> list[Shape]:
    """Machine types and attachable-GPU combinations in every zone (ProviderError when GCE fails)."""
    clients = factory.compute()
    out: list[Shape] = []
    for zone in zones:
        try:
            types = clients.machine_types.list(
                request=compute_v1.ListMachineTypesRequest(project=project, zone=zone, max_results=PAGE_SIZE),
                retry=factory.retry(),
                timeout=factory.timeout,
            )
            machines = [s for mt in types if _usable(mt) and (s := _machine_shape(mt, zone)) is not None]
            accelerators = clients.accelerator_types.list(
                request=compute_v1.ListAcceleratorTypesRequest(
                    project=project, zone=zone, max_results=PAGE_SIZE
                ),
                retry=factory.retry(),
                timeout=factory.timeout,
            )
            out.extend(machines)
            out.extend(attached_shapes(machines, list(accelerators)))
        except CALL_ERRORS as err:
            raise api_error(err, f"listing machine types in {zone}") from None
    return out
