"""Import at start what the first plan would otherwise import while pods wait.

The exact plan's solver (OR-Tools CP-SAT, which brings NumPy and pandas) takes about a third of a second to
import: paid inside the first reconcile of a burst, it delays the first nodes by as much. The daemon imports
it on a thread of its own while its caches sync, so that cost is spent before any pod is pending.
"""

from __future__ import annotations

import importlib
import threading

import structlog

__all__ = ["SOLVER_MODULES", "warm_up"]

log = structlog.get_logger("tidal.daemon")

# What the exact step imports on its first small batch: its model and solver modules, and OR-Tools.
SOLVER_MODULES = (
    "autoscaler.core.planning.exact",
    "autoscaler.core.planning.exact_model",
    "autoscaler.core.planning.exact_patterns",
    "autoscaler.core.planning.exact_solve",
    "ortools.sat.python.cp_model",
)


def warm_up(exact_plan: bool) -> threading.Thread | None:
    """Start importing the solver when exact plans are on; the thread is returned so tests can join it.
    A solver that is not installed is not an error here: the planner says so where it needs it."""
    if not exact_plan:
        return None

    def load() -> None:
        for name in SOLVER_MODULES:
            try:
                importlib.import_module(name)
            except ImportError as err:
                log.debug("solver_not_preloaded", module=name, error=str(err))

    thread = threading.Thread(target=load, name="tidal-warmup", daemon=True)
    thread.start()
    return thread
