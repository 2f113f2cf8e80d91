"""The only package that talks to the Kubernetes API (official `kubernetes` client).

- `client`: `Api` (the interface: get/list/watch/create/replace/replace_status/patch/delete of
  plain dicts) and `KubeClient` (the real one), `load_configuration`, `RateLimiter`;
- `errors`: NotFound, Conflict, AlreadyExists, Gone, Invalid, Unavailable (all `KubeError`);
- `resources`: the kinds (`Resource(group, version, plural, kind, namespaced)`);
- `informer`: list+watch into a cache; `nas`: NodeAllocationState read/update with optimistic
  concurrency; `events`: Events on objects; `snapshot`: read a cluster for the what-if.
"""
