"""Simulated actors for tests and the demo: in-process API server, scheduler, kubelet."""
