"""What tidal knows about GCE accelerator types: model names, memory, and which GPUs attach to N1 VMs.

GCE names accelerators by type (``nvidia-tesla-t4``, ``nvidia-a100-80gb``); tidal's planner matches pods to
GPUs by short model name (``T4``, ``A100``) and memory, so every type is translated here once.

Attachable GPUs (T4, V100, P100, P4) are not part of a machine type: an N1 VM gets them through
``guestAccelerators``. tidal offers each valid (N1 machine type, GPU type, count) combination as its own
offering, named ``<machine type>_<accelerator type>x<count>``, e.g. ``n1-standard-8_nvidia-tesla-t4x1``.
The name must also be a valid Kubernetes label value, because tidal writes the offering's name to the
Node's ``node.kubernetes.io/instance-type`` label; that is why the separator is ``_`` and not ``+``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "ATTACHABLE",
    "Accelerator",
    "AttachLimit",
    "accelerator",
    "attached_name",
    "split_attached_name",
]

GIB_MIB = 1024


@dataclass(frozen=True, slots=True)
class Accelerator:
    """One GCE accelerator type as tidal's planner sees it."""

    type: str
    model: str
    memory_mib: int


@dataclass(frozen=True, slots=True)
class AttachLimit:
    """How many of an attachable GPU an N1 VM may have, and the largest VM each count allows."""

    count: int
    max_vcpu: int
    max_memory_gb: int


# Known accelerator types. A100 and H100 keep their memory size, which is how pods ask for the 80 GB parts.
_KNOWN = {
    "nvidia-tesla-t4": Accelerator("nvidia-tesla-t4", "T4", 16 * GIB_MIB),
    "nvidia-tesla-v100": Accelerator("nvidia-tesla-v100", "V100", 16 * GIB_MIB),
    "nvidia-tesla-p100": Accelerator("nvidia-tesla-p100", "P100", 16 * GIB_MIB),
    "nvidia-tesla-p4": Accelerator("nvidia-tesla-p4", "P4", 8 * GIB_MIB),
    "nvidia-tesla-k80": Accelerator("nvidia-tesla-k80", "K80", 12 * GIB_MIB),
    "nvidia-l4": Accelerator("nvidia-l4", "L4", 24 * GIB_MIB),
    "nvidia-tesla-a100": Accelerator("nvidia-tesla-a100", "A100", 40 * GIB_MIB),
    "nvidia-a100-80gb": Accelerator("nvidia-a100-80gb", "A100", 80 * GIB_MIB),
    "nvidia-h100-80gb": Accelerator("nvidia-h100-80gb", "H100", 80 * GIB_MIB),
    "nvidia-h100-mega-80gb": Accelerator("nvidia-h100-mega-80gb", "H100", 80 * GIB_MIB),
    "nvidia-h200-141gb": Accelerator("nvidia-h200-141gb", "H200", 141 * GIB_MIB),
    "nvidia-b200": Accelerator("nvidia-b200", "B200", 180 * GIB_MIB),
}

# GPUs that attach to N1 machine types, with the per-count VM size limits GCE documents.
ATTACHABLE: dict[str, tuple[AttachLimit, ...]] = {
    "nvidia-tesla-t4": (AttachLimit(1, 48, 312), AttachLimit(2, 48, 312), AttachLimit(4, 96, 624)),
    "nvidia-tesla-v100": (
        AttachLimit(1, 12, 78),
        AttachLimit(2, 24, 156),
        AttachLimit(4, 48, 312),
        AttachLimit(8, 96, 624),
    ),
    "nvidia-tesla-p100": (AttachLimit(1, 16, 104), AttachLimit(2, 32, 208), AttachLimit(4, 64, 208)),
    "nvidia-tesla-p4": (AttachLimit(1, 24, 156), AttachLimit(2, 48, 312), AttachLimit(4, 96, 624)),
}
ATTACHING_FAMILIES = ("n1",)

_ATTACHED = re.compile(r"^(?P<machine>[a-z0-9-]+)_(?P<accel>[a-z0-9-]+)x(?P<count>[0-9]+)$")
_VIRTUAL_WORKSTATION = "-vws"


def accelerator(accelerator_type: str, description: str = "") -> Accelerator | None:
    """The accelerator behind a GCE type name; unknown NVIDIA types get a model derived from the name.

    Virtual-workstation types (``…-vws``) are the same GPUs sold with a licence tidal has no use for, so they
    are not accelerators tidal offers.
    """
    name = accelerator_type.rsplit("/", 1)[-1]
    if name.endswith(_VIRTUAL_WORKSTATION):
        return None
    known = _KNOWN.get(name)
    if known is not None:
        return known
    if not name.startswith("nvidia-"):
        return None
    # A type GCE added after this table: "nvidia-x200-96gb" -> model X200 with 96 GiB.
    parts = [p for p in name.removeprefix("nvidia-").split("-") if p not in ("tesla", "mega")]
    memory = next((int(p[:-2]) for p in parts if re.fullmatch(r"[0-9]+gb", p)), 0)
    model = "".join(p for p in parts if not re.fullmatch(r"[0-9]+gb", p)).upper()
    return Accelerator(name, model or description or name, memory * GIB_MIB) if model else None


def attached_name(machine_type: str, accelerator_type: str, count: int) -> str:
    """The offering name of an N1 machine type with attached GPUs: ``n1-standard-8_nvidia-tesla-t4x1``."""
    return f"{machine_type}_{accelerator_type}x{count}"


def split_attached_name(instance_type: str) -> tuple[str, str, int]:
    """``n1-standard-8_nvidia-tesla-t4x1`` → ``("n1-standard-8", "nvidia-tesla-t4", 1)``; plain types get
    ``("n1-standard-8", "", 0)``."""
    m = _ATTACHED.match(instance_type)
    if m is None:
        return instance_type, "", 0
    return m.group("machine"), m.group("accel"), int(m.group("count"))


def attach_limits(machine_family: str, accelerator_type: str) -> tuple[AttachLimit, ...]:
    """The counts of ``accelerator_type`` a VM of ``machine_family`` may attach (none for most pairs)."""
    if machine_family not in ATTACHING_FAMILIES:
        return ()
    return ATTACHABLE.get(accelerator_type, ())
