"""What the fake Compute Engine refuses or fails: error responses, insert checks, injected failure rules."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

NAME = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
LABEL_KEY = re.compile(r"[a-z][a-z0-9_-]{0,62}")
LABEL_VALUE = re.compile(r"[a-z0-9_-]{0,63}")
ATTACHABLE = {"nvidia-tesla-t4", "nvidia-tesla-v100", "nvidia-tesla-p100", "nvidia-tesla-p4"}


class GceError(Exception):
    """An error response: HTTP status, ``errors[].reason`` and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message

    def body(self) -> dict[str, Any]:
        """The JSON error body GCE sends."""
        return {
            "error": {
                "code": self.status,
                "message": self.message,
                "errors": [{"domain": "global", "reason": self.reason, "message": self.message}],
            }
        }


@dataclass
class Rule:
    """Inserts matching the pattern (None = any) fail inside their operation with ``code``."""

    code: str
    status: int
    message: str
    machine_type: str | None = None
    zone: str | None = None
    provisioning_model: str | None = None
    accelerator: str | None = None
    remaining: int | None = None  # None: every matching insert
    details: list[dict[str, Any]] | None = None  # the error's errorDetails (quotaInfo for QUOTA_EXCEEDED)

    def matches(self, machine_type: str, zone: str, model: str, accelerator: str) -> bool:
        """Whether an insert of these properties fails by this rule."""
        return (
            (self.remaining is None or self.remaining > 0)
            and self.machine_type in (None, machine_type)
            and self.zone in (None, zone)
            and self.provisioning_model in (None, model)
            and self.accelerator in (None, accelerator)
        )


def last(url: str) -> str:
    """The last path segment of a resource URL."""
    return url.rstrip("/").rsplit("/", 1)[-1]


def validate_insert(
    body: dict[str, Any], machine_types: list[dict[str, Any]], accelerator_types: list[dict[str, Any]]
) -> tuple[dict[str, Any], str, str, int]:
    """Check an insert body as GCE does; returns (machine type, provisioning model, accelerator, count)."""
    name = body.get("name", "")
    if not NAME.fullmatch(name):
        raise GceError(400, "invalid", f"Invalid value for field 'resource.name': '{name}'")
    machine = last(body.get("machineType", ""))
    mt = next((m for m in machine_types if m["name"] == machine), None)
    if mt is None:
        raise GceError(400, "invalid", f"Invalid value for field 'resource.machineType': '{machine}'")
    for k, v in (body.get("labels") or {}).items():
        if not LABEL_KEY.fullmatch(k) or not LABEL_VALUE.fullmatch(str(v)):
            raise GceError(400, "invalid", f"Invalid value for field 'resource.labels': '{k}={v}'")
    if len(body.get("labels") or {}) > 64:
        raise GceError(400, "invalid", "Too many labels")
    accelerators = body.get("guestAccelerators") or []
    accel, count = "", 0
    for acc in accelerators:
        accel, count = last(acc.get("acceleratorType", "")), int(acc.get("acceleratorCount", 0))
        known = {a["name"]: a for a in accelerator_types}
        if accel not in known or accel not in ATTACHABLE or not machine.startswith("n1-"):
            raise GceError(400, "invalid", f"Invalid value for field 'resource.guestAccelerators': '{accel}'")
        if count < 1 or count > known[accel]["maximumCardsPerInstance"]:
            raise GceError(400, "invalid", f"Invalid accelerator count {count} for {accel}")
    scheduling = body.get("scheduling") or {}
    model = scheduling.get("provisioningModel", "STANDARD")
    gpus = bool(accelerators) or bool(mt.get("accelerators"))
    if (gpus or model == "SPOT") and scheduling.get("onHostMaintenance", "MIGRATE") != "TERMINATE":
        raise GceError(
            400, "invalid", "Instances with guest accelerators or Spot do not support live migration."
        )
    if model == "SPOT" and scheduling.get("automaticRestart", True):
        raise GceError(400, "invalid", "Spot instances cannot be automatically restarted.")
    return mt, model, accel, count
