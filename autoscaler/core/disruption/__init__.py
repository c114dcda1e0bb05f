"""Disruption: why and when tidal takes a node it launched out of service, one module per method.

- ``empty``: only DaemonSet, mirror (and KAI background) pods run on it.
- ``underutilised``: its pods fit on the nodes that stay.
- ``replace``: new nodes would hold its pods for less.
- ``interrupted``: the cloud is reclaiming it (a spot interruption notice); nothing waits.
- ``expired``: older than ``disruption.nodeMaxLifetime``.
- ``drifted``: launched from a node template (nodeLabels, nodeTaints, the provider's image settings) that
  the configuration no longer describes.
- ``unhealthy``: a configured node condition has held for its duration (GPU lost, XID errors, NotReady).

Every method is pure (``planning`` calls them); the controller acts (``autoscaler/runtime/disrupting.py``).
``protection`` says which pods must never be evicted, and ``budgets`` how many nodes may be disrupted at
once. This package's ``__init__`` imports nothing, so that the planner's value types can name a method
without importing the methods.
"""
