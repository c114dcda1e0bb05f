"""The real Kubernetes control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager) for tests."""
