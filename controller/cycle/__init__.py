"""The parts of one v1 allocation cycle (`controller.v1controller` orchestrates them), each
owning one question over the cycle's snapshot:

- `releasing`: the ledger settled with the claims' statuses (stale entries out, entries restored
  from statuses, claims being deleted that no pod holds released, claims no pod uses any more
  deallocated: `deallocation`, which the gang writes use too);
- `repairing`: allocated claims whose statuses name one device (clashes);
- `allocating`: the order and solve of the cycle's pending pods, their refusals and decisions;
  `allocationwrites`: the writes of what was placed (ledger entries, finalizer, status, gate);
- `wholegangs`: gangs placed and let go whole (membership itself: `controller.gangs`);
- `gates`: drasat's scheduling gate lifted from a pod.

What they share is handed to each explicitly: `writes.Writes` (every write only while this
replica leads, several at once, a failure confined to what caused it), `ledger.Ledger` (the NAS
ledger written under optimistic concurrency) and `ownwrites.OwnWrites` (this process's memory of
its own writes, which count before the informers see them). Preemption's part is
`controller.preemption.Preempter`.
"""
