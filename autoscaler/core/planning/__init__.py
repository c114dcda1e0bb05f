"""The pure planning core: scale-up, scale-down and their explanations; the entry point is
:func:`autoscaler.core.planning.planner.plan`."""
