"""The edge that observes and acts: the reconcile loop, the cluster and cloud clients, draining, metrics."""
