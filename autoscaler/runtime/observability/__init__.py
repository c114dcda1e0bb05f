"""What tidal tells operators: Prometheus metrics, structured logs, health endpoints and Kubernetes events."""
