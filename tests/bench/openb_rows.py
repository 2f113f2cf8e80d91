"""Small openb clusters and pod lists built from rows, for the openb bench tests."""

from __future__ import annotations

import numpy as np

from bench import openb_trace

#: (cpu milli, memory MiB, GPUs, model)
NodeRows = list[tuple[int, int, int, str]]
#: (cpu milli, memory MiB, num_gpu, milli per GPU, spec)
PodRows = list[tuple[int, int, int, int, str]]


def nodes_of(rows: NodeRows) -> openb_trace.Nodes:
    models = tuple(sorted({r[3] for r in rows}))
    return openb_trace.Nodes(
        names=tuple(f"n{i}" for i in range(len(rows))),
        cpu_milli=np.array([r[0] for r in rows], dtype=np.int64),
        memory_mib=np.array([r[1] for r in rows], dtype=np.int64),
        gpus=np.array([r[2] for r in rows], dtype=np.int64),
        model=np.array([models.index(r[3]) for r in rows], dtype=np.int64),
        models=models,
    )


def pods_of(rows: PodRows) -> openb_trace.Pods:
    return openb_trace.Pods(
        names=tuple(f"p{i:04d}" for i in range(len(rows))),
        cpu_milli=np.array([r[0] for r in rows], dtype=np.int64),
        memory_mib=np.array([r[1] for r in rows], dtype=np.int64),
        num_gpu=np.array([r[2] for r in rows], dtype=np.int64),
        milli=np.array([r[3] for r in rows], dtype=np.int64),
        spec=tuple(r[4] for r in rows),
    )
