"""Kubelet DRA plugin: registration, DRA gRPC service, NVML, MIG, sharing, CDI, checkpoint.

`app` wires `plugin.NodePlugin` from options; `registration` and `dra` are the thin gRPC surface;
`state` prepares and unprepares claims (retry-safe, recorded in `checkpoint`), writing `cdi` specs
and starting `mps` daemons; `publish` and `health` keep the NAS (`nasstore`) up to date; all
hardware access goes through `devices.DeviceLib`, implemented by `nvml` over pynvml or the
simulated fleet of `simnvml`. See docs/NODEPLUGIN.md.
"""
