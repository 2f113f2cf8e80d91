"""The placement solver: compiles a Problem into CP-SAT, solves, extracts a Solution. Pure.

Imports only `drasat.api` and ortools: no Kubernetes, gRPC or NVML.
"""
