"""The CDI spec of one device of this node, made by the node plugin's prepare, without a kubelet.

`drasat cdi-spec` and `scripts/gpu_check.py` use it: a node plugin over a throw-away state folder
and an in-memory NodeAllocationState prepares a claim whose one allocation result is the named
device (`gpu-<minor>` or `gpu-<minor>-mig-<profile>-<id>-<start>`, the ResourceSlice names),
through the same translation a v1 kubelet's claim takes (`v1claims.allocation_from_claim`), reads
the spec it wrote, and unprepares it. An exclusive whole GPU changes nothing on the GPU (no
sharing, no lifecycle step); a MIG device is created and destroyed again, so callers on real GPUs
refuse MIG devices (`is_mig`).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from drasat import DRIVER_NAME
from drasat.api.devicemodel import names
from drasat.nodeplugin import mps, v1claims
from drasat.nodeplugin.devicelib import DeviceLib
from drasat.nodeplugin.nasstore import MemoryNasStore
from drasat.nodeplugin.plugin import Config, NodePlugin
from drasat.nodeplugin.state import ClaimRef

NODE = "cdi-spec"
CLAIM = ClaimRef(uid="cdi-spec-claim", namespace="default", name="cdi-spec")


@dataclass(frozen=True)
class Prepared:
    """What the plugin answered and wrote for the claim."""

    device_ids: list[str]
    spec: dict[str, Any]


def is_mig(device: str) -> bool:
    """Whether `device` names a MIG placement (preparing it creates a MIG device)."""
    return "-mig-" in device


def prepare(device: str, *, lib: DeviceLib, config: Config) -> Prepared:
    """Prepare a claim for `device` on `lib`'s GPUs with `config`'s roots and CDI mode, in a
    temporary state and CDI folder; ClaimError (from the plugin) naming what is wrong."""
    with tempfile.TemporaryDirectory(prefix="drasat-cdi-spec-") as work:
        folder = Path(work)
        config = replace(
            config,
            node_name=NODE,
            cdi_root=folder / "cdi",
            state_dir=folder / "state",
            plugin_dir=folder / "plugins",
            registry_dir=folder / "registry",
            gc_interval_s=0,
            health_events=False,
        )
        store = MemoryNasStore(node=NODE, namespace=config.namespace)
        plugin = NodePlugin(config, lib=lib, store=store, mps_runner=mps.RecordingRunner())
        plugin.publish(ready=True)
        claim = {
            "metadata": {"namespace": CLAIM.namespace, "name": CLAIM.name, "uid": CLAIM.uid},
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": DRIVER_NAME,
                                "pool": NODE,
                                "device": device,
                            }
                        ]
                    }
                }
            },
        }
        resolved = v1claims.allocation_from_claim(
            claim, CLAIM, pool=NODE, gpus=plugin.state.gpus(), profiles=lib.mig_profiles
        )
        ids = plugin.state.prepare(CLAIM, resolved.plan)
        try:
            spec = json.loads(plugin.state.cdi.path(CLAIM.uid).read_text())
        finally:
            plugin.state.unprepare(CLAIM)
        return Prepared(device_ids=ids, spec=spec)


def first_gpu(lib: DeviceLib) -> str:
    """The device name of the GPU with the lowest NVML index ("" when there is none)."""
    gpus = sorted(lib.gpus(), key=lambda g: g.index)
    return names.gpu_name(gpus[0].minor) if gpus else ""
