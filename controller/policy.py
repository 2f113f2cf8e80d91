"""The allocation policy in force: from a file or a ConfigMap, reloaded on change.

A bad policy is rejected with one log line naming the file (or ConfigMap key) and the field path;
the last good policy stays in force. Until a first good one is read, the default policy applies.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable
from pathlib import Path

from drasat import policyfiles
from drasat.api.inputerrors import InputError
from drasat.api.policy import AllocationPolicySpec
from drasat.kube import errors
from drasat.kube.client import Api
from drasat.kube.resources import CONFIGMAPS

log = logging.getLogger(__name__)

CONFIGMAP_KEY = "policy.yaml"


def parse(text: str, source: str) -> AllocationPolicySpec:
    """One AllocationPolicy document -> its spec; raises InputError naming source and field."""
    return policyfiles.from_text(text, source=source).spec


class PolicySource:
    """Holds the policy in force; `poll()` re-reads its source and swaps in a good new one."""

    def __init__(
        self,
        read: Callable[[], str | None] | None = None,
        *,
        source: str = "default",
        on_result: Callable[[str], None] = lambda result: None,
    ) -> None:
        self._read = read
        self.source = source
        self._on_result = on_result
        self._policy = AllocationPolicySpec()
        self._digest: str | None = None
        self._lock = threading.Lock()
        self.last_error = ""

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Callable[[str], None]) -> PolicySource:
        def read() -> str | None:
            try:
                return Path(path).read_text(encoding="utf-8")
            except OSError as error:
                raise InputError(f"cannot read: {error}", where=str(path)) from None

        return cls(read, source=str(path), **kwargs)

    @classmethod
    def from_configmap(
        cls,
        api: Api,
        *,
        namespace: str,
        name: str,
        key: str = CONFIGMAP_KEY,
        **kwargs: Callable[[str], None],
    ) -> PolicySource:
        def read() -> str | None:
            try:
                configmap = api.get(CONFIGMAPS, name, namespace=namespace)
            except errors.NotFound:
                raise InputError("ConfigMap not found", where=f"{namespace}/{name}") from None
            data = configmap.get("data") or {}
            if key not in data:
                where = f"ConfigMap {namespace}/{name}"
                raise InputError(f"no key {key} in data", where=where)
            return str(data[key])

        return cls(read, source=f"ConfigMap {namespace}/{name} key {key}", **kwargs)

    def current(self) -> AllocationPolicySpec:
        with self._lock:
            return self._policy

    def poll(self) -> bool:
        """Re-read the source; True when a new policy came into force. Never raises."""
        if self._read is None:
            return False
        try:
            text = self._read()
        except errors.KubeError as error:  # the API is unreachable: keep what we have
            log.warning(
                "policy %s: cannot read (%s); keeping the policy in force", self.source, error
            )
            return False
        except InputError as error:
            return self._reject(str(error), key=str(error))
        if text is None:
            return False
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest == self._digest:
            return False
        try:
            policy = parse(text, self.source)
        except InputError as error:
            return self._reject(str(error), key=digest)
        with self._lock:
            self._policy, self._digest = policy, digest
        self.last_error = ""
        log.info("policy %s: loaded", self.source)
        self._on_result("ok")
        return True

    def _reject(self, message: str, *, key: str) -> bool:
        if key != self._digest:  # one log line per bad version, not per poll
            self._digest = key
            self.last_error = message
            log.error("policy rejected, the last good policy stays in force: %s", message)
            self._on_result("rejected")
        return False
