"""A simulation's configuration: the scenario's ``config:``, the user's overrides, and the simulated cloud's
settings, with each error pointing at the layer that wrote the key."""

from __future__ import annotations

import re
from typing import Any

from autoscaler.config.options import Config, ConfigError, config_from_mapping
from autoscaler.sim.scenario import Scenario

__all__ = ["GPU_READY_DELAY", "LAUNCH_DELAY", "REGISTRATION_DELAY", "build_config"]

LAUNCH_DELAY, REGISTRATION_DELAY, GPU_READY_DELAY = 60.0, 45.0, 30.0


def build_config(
    scenario: Scenario,
    overrides: dict[str, Any],
    *,
    catalog: str,
    cloud: str,
    region: str,
    overrides_source: str = "--config",
) -> Config:
    """The scenario's configuration, the user's overrides, and the simulated cloud's settings.

    An error names where the key was written: ``config.`` in the scenario, or ``overrides_source`` (the
    ``--config`` file) for the overrides.
    """
    data: dict[str, Any] = {**scenario.config, **overrides}
    written = {str(key): _IN_SCENARIO for key in scenario.config}
    written.update({str(key): _IN_OVERRIDES for key in overrides})
    data.setdefault("cloud", cloud)
    data.setdefault("region", region)
    if cloud:
        data["cloud"] = cloud
        written.pop("cloud", None)
    if region:
        data["region"] = region
        written.pop("region", None)
    if scenario.kai:
        data.setdefault("pendingPodReasonRegexp", _kai_regexp())
        data.setdefault("schedulerNames", ["kai-scheduler"])
    data["leaderElection"] = {"enabled": False}
    # The simulated cloud numbers instances in the order launches reach it; launching from parallel threads
    # would let thread timing pick that order (and which nodes a spot wave reclaims), so one seed, one run.
    data["maxParallelLaunches"] = 1
    data["simulated"] = {
        "catalog": catalog,
        "catalogCloud": data["cloud"],
        "catalogRegion": data["region"],
        "registerNodes": True,
        "launchDelay": f"{int(LAUNCH_DELAY)}s",
        "registrationDelay": f"{int(REGISTRATION_DELAY)}s",
        "gpuReadyDelay": f"{int(GPU_READY_DELAY)}s",
    }
    if scenario.reservations:
        data["simulated"]["reservations"] = [
            {
                "id": r.id,
                "instanceType": r.instance_type,
                "zone": r.zone,
                "count": r.count,
                "kind": r.kind,
                **({"start": r.at} if r.at is not None else {}),
                **({"end": r.until} if r.until is not None else {}),
            }
            for r in scenario.reservations
        ]
    for key in ("leaderElection", "maxParallelLaunches", "simulated"):
        written.pop(key, None)  # set here over whatever the user wrote: an error in them is not the user's
    source = f"scenario {scenario.name}"
    try:
        return config_from_mapping(data, source=source)
    except ConfigError as err:
        raise _attributed(err, written, source, overrides_source) from None


_IN_SCENARIO, _IN_OVERRIDES = "scenario", "overrides"


def _attributed(err: ConfigError, written: dict[str, str], scenario: str, overrides: str) -> ConfigError:
    """``err`` with each problem pointing at the layer its top-level key came from."""
    by_source: dict[str, list[str]] = {}
    for problem in err.errors:
        layer = written.get(re.split(r"[.\[:]", problem, maxsplit=1)[0])
        if layer == _IN_OVERRIDES:
            by_source.setdefault(overrides, []).append(problem)
        else:
            # The scenario file's keys sit under its `config:` block; keys set from flags have no prefix.
            prefix = "config." if layer == _IN_SCENARIO else ""
            by_source.setdefault(scenario, []).append(prefix + problem)
    if len(by_source) == 1:
        ((source, problems),) = by_source.items()
        return ConfigError(problems, source)
    return ConfigError([f"{source}: {p}" for source, problems in by_source.items() for p in problems])


def _kai_regexp() -> str:
    """The KAI preset's pendingPodReasonRegexp (the same text as config/examples/kai.yaml)."""
    from autoscaler.sim.presets import KAI_PENDING_REGEXP

    return KAI_PENDING_REGEXP
