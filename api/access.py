"""What a claim's devices give its users, in one short label (the what-if's SHARING column, the
demo's NodeAllocationState table).

A claim holds its GPUs or MIG devices alone; what varies is how its own users share them and
whether it is a partial GPU:

- `exclusive`: whole devices, one pod, the default time slice (the devices' baseline: the node
  plugin changes nothing);
- `time-sliced (Long)`: a time slice other than the default, or several pods on the claim
  (`, 2 pods`);
- `MPS`: an MPS daemon with the claim's limits (`, 2 pods` likewise);
- `share 50%/8Gi (MPS)`: a partial GPU beside other share claims, enforced by MPS or
  time-sliced.

The `sharing` of a NodeAllocationState entry is always set (the solver writes NVIDIA's default,
time-slicing with the default slice, where the claim names none), so the label is read from what
is configured, not from whether a `sharing` field is present.
"""

from __future__ import annotations

from drasat.api.sharing import GpuShare, GpuSharing, SharingStrategy, TimeSlice


def label(sharing: GpuSharing | None, share: GpuShare | None = None, users: int = 1) -> str:
    """The label of a claim with this sharing and share, used by `users` pods."""
    strategy = sharing.strategy if sharing is not None else None
    if share is not None:
        amounts = [f"{share.compute}%" if share.compute is not None else ""]
        amounts.append(str(share.memory) if share.memory is not None else "")
        # A share without a strategy is enforced by MPS (the node plugin's rule).
        how = "time-sliced" if strategy is SharingStrategy.TimeSlicing else "MPS"
        return f"share {'/'.join(a for a in amounts if a)} ({how})"
    pods = f", {users} pods" if users > 1 else ""
    if strategy is SharingStrategy.MPS:
        return f"MPS{pods}"
    config = sharing.timeSlicingConfig if sharing is not None else None
    level = config.effective if config is not None else TimeSlice.Default
    if level is TimeSlice.Default and users <= 1:
        return "exclusive"
    return f"time-sliced ({level.value}){pods}"
