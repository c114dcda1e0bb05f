"""Scale-up's exact step: when the heuristic's new nodes hold few enough pods, buy the exact cheapest nodes
for the same pods instead, if they cost strictly less.

The step keeps the decision pure and deterministic: whether it runs depends on the batch's size
(``exactPlanMaxPods`` pods on new nodes), never on the clock; the solver works on one thread within a budget
of its deterministic time (``WORK``, counted in its own units of work, the same on every machine) and at most
``ROUNDS`` programs; and its plan is taken when strictly cheaper, whether proven optimal or the best the
solver found within that budget (the same on every machine either way). ``exactPlanTimeLimit`` is a
wall-clock safety net against a machine far slower than expected: the solver then gives up and the
heuristic's plan stands, the only case where the machine can change a plan.

The exact nodes go through the placement engine like any other: each is opened with the offerings of its
type and takes its pods by ``can_add``/``add``; if the engine refuses one (it packs GPU shares as KAI's
binpack does, device by device, which the model's best assignment may beat), the step is taken back whole.
Pods whose place depends on other pods, gangs, host ports, queue budgets and reserved capacity keep the
heuristic's plan.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from autoscaler.core.demand import Demand
from autoscaler.core.offering import Offering
from autoscaler.core.placement.bins import Bin, Option
from autoscaler.core.placement.engine import Engine
from autoscaler.core.placement.reasons import Rejection
from autoscaler.core.planning import newnodes
from autoscaler.core.planning.decisions import BIN_PACKING, Launch, Usage
from autoscaler.core.planning.offerings import OfferingIndex
from autoscaler.core.spot_risk import node_hours, risk_price

if TYPE_CHECKING:
    # The exact model and its solvers are imported where a batch is small enough to try them: a plan of
    # thousands of pods (and the ``tidal plan`` of one) never needs them.
    from autoscaler.core.planning import exact, exact_model

__all__ = ["explained", "improve", "limits"]

CHEAPER = 1e-6  # $/h: the exact plan must save at least this much to replace the heuristic's
ROUNDS = 3  # programs solved at most (each finer than the last, see exact_solve): a bound on the work
WORK = 0.02  # CP-SAT's deterministic seconds per program: the same work, so the same plan, on any machine


def limits(index: OfferingIndex, usage: Usage) -> exact.Limits:
    """What the cluster limits leave for new nodes, given what exists and launches already."""
    from autoscaler.core.planning import exact

    cfg = index.config
    return exact.Limits(
        gpus=None if cfg.cluster_gpu_limit is None else max(0, cfg.cluster_gpu_limit - usage.gpus),
        cpu_milli=None if cfg.cluster_cpu_limit is None else max(0, cfg.cluster_cpu_limit - usage.cpu_milli),
        nodes=None if cfg.max_nodes is None else max(0, cfg.max_nodes - usage.managed_nodes),
    )


def improve(engine: Engine, index: OfferingIndex, demand: Demand, usage: Usage) -> float:
    """Replace the new nodes the heuristic opened in ``engine`` by the exact cheapest ones for their pods,
    when the batch is small enough and they are strictly cheaper; return the $/h saved (0: nothing changed)."""
    cfg = index.config
    bins = [b for b in engine.opened() if b.pods]
    if not bins or cfg.exact_plan_max_pods <= 0 or cfg.queue_budgets or not engine.topology.idle:
        return 0.0
    if sum(len(b.pods) for b in bins) > cfg.exact_plan_max_pods or any(b.gang for b in bins):
        return 0.0
    by_key = {p.key: p for p in demand.counted}
    items = []
    for b in bins:
        for key in b.pods:
            pod = by_key.get(key)
            if pod is None or pod.host_ports or engine.inter_pod(pod):
                return 0.0
            items.append((pod, demand.constraints[key], b.mode))
    chosen = [_chosen(b) for b in bins]
    if any(o.reservation is not None for o in chosen):
        return 0.0
    from autoscaler.core.planning import exact, exact_model

    # In the model's terms: prices with spot interruptions' expected cost (see exact.NodeType.price).
    current = round(
        sum(
            risk_price(o, node_hours(c.interruption_hours for c in b.classes))
            for o, b in zip(chosen, bins, strict=True)
        ),
        6,
    )
    problem = exact.problem(items, index, limits(index, usage))
    try:
        outcome = _solve(problem, current - CHEAPER, cfg.exact_plan_time_limit)
    except exact_model.SolverMissing:
        return 0.0
    solution = outcome.solution
    if outcome.status not in ("optimal", "feasible") or solution is None or exact.verify(problem, solution):
        return 0.0
    if solution.cost > current - CHEAPER:
        return 0.0
    return round(current - solution.cost, 6) if _apply(engine, index, problem, solution, bins) else 0.0


def _solve(problem: exact.Problem, bound: float, time_limit: float) -> exact_model.Outcome:
    """By node patterns when the batch has few enough of them (exact in one program), else by counts."""
    from autoscaler.core.planning import exact_patterns, exact_solve

    outcome = exact_patterns.solve(problem, cost_bound=bound, time_limit=time_limit, work_limit=WORK)
    if outcome is not None:
        return outcome
    return exact_solve.solve(
        problem, cost_bound=bound, time_limit=time_limit, rounds=ROUNDS, work_limit=WORK, tight=True
    )


def explained(launched: list[Launch], saving: float) -> list[Launch]:
    """The launches of an exact plan, each saying what the plan saves over the heuristic's."""
    return [
        replace(la, why=replace(la.why, exact_saving=saving)) if la.why is not None else la for la in launched
    ]


def _chosen(b: Bin) -> Offering:
    classes = sorted(b.classes, key=repr)
    return newnodes.cheapest(b, classes)


def _apply(engine: Engine, index: OfferingIndex, p: exact.Problem, s: exact.Solution, old: list[Bin]) -> bool:
    """Put the exact nodes in the place of ``old`` through the engine; take everything back if it refuses."""
    journal = engine.journal
    mark = journal.mark()
    for b in old:
        _close(engine, b)
    taken = [0] * len(p.groups)  # the nodes take each group's pods in order
    for node in s.nodes:
        t = p.types[node.type]
        o = t.offering
        b = engine.open(
            [Option(index.allocatable(o), t.offerings)], mode=t.mode, gpus=o.gpu_count, vcpu=o.vcpu
        )
        # Bigger shares first, as they leave the fewest ways to pack the rest.
        for g_index, n in sorted(node.counts, key=lambda gc: _share_order(p.groups[gc[0]])):
            if not _add(engine, index, b, p.groups[g_index], n, taken[g_index]):
                journal.rollback(mark)
                return False
            taken[g_index] += n
    journal.commit(mark)
    return True


def _share_order(g: exact.PodGroup) -> tuple[float, str]:
    share = g.share
    size = 0.0 if share is None else -(share.portion or 0.0) - (share.memory_mib or 0) / 1e6
    return (size, g.pods[0].key)


def _add(engine: Engine, index: OfferingIndex, b: Bin, g: exact.PodGroup, n: int, start: int) -> bool:
    pods = g.pods[start : start + n]
    allowed = index.allowed(g.c, g.mode == BIN_PACKING)
    while pods:
        fit = engine.can_add(pods[0], g.c, b, len(pods), allowed)
        if isinstance(fit, Rejection) or fit.count <= 0:
            return False
        engine.add(pods[0], g.c, b, fit, [p.key for p in pods[: fit.count]])
        pods = pods[fit.count :]
    return True


def _close(engine: Engine, b: Bin) -> None:
    """Take a node the heuristic opened out of the plan (the journal puts it back)."""
    at = next(i for i in range(len(engine.bins) - 1, -1, -1) if engine.bins[i] is b)
    del engine.bins[at]
    engine.topology.remove_node(b.name)
    engine.journal.log(lambda: engine.bins.insert(at, b))
