"""End-to-end tests against a real Kubernetes control plane (scripts/dev-cluster)."""
