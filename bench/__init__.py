"""Benchmarks: packing quality on the Alibaba openb trace, decision latency.

Run from the repository root as modules, e.g. `python -m bench.openb --traces DIR`.
Not part of the installed package; each benchmark documents its command in docs/PERFORMANCE.md.
"""
