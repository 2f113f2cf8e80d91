"""Errors of the Kubernetes API as our own exceptions, so no caller imports `kubernetes`."""

from __future__ import annotations


class KubeError(Exception):
    """An API call failed. `status` is the HTTP status (0: no answer), `reason` the API's."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        self.status = status
        self.reason = reason
        super().__init__(message)


class NotFound(KubeError):
    """404: the object (or its kind) does not exist."""


class Conflict(KubeError):
    """409: a stale resourceVersion, or the object already exists."""


class AlreadyExists(Conflict):
    """409 on create: an object of that name exists."""


class Gone(KubeError):
    """410: the resourceVersion is too old to watch from; list again."""


class Invalid(KubeError):
    """422: the server rejected the object; the message names the field."""


class Unavailable(KubeError):
    """No answer (connection refused, timeout) or a 5xx/429: worth retrying later."""


def from_status(status: int, reason: str, message: str) -> KubeError:
    """The exception for an HTTP status and the API's Status reason/message."""
    text = f"{status} {reason}: {message}" if message else f"{status} {reason}"
    if status == 404:
        return NotFound(text, status=status, reason=reason)
    if status == 409:
        cls = AlreadyExists if reason == "AlreadyExists" else Conflict
        return cls(text, status=status, reason=reason)
    if status == 410:
        return Gone(text, status=status, reason=reason)
    if status == 422:
        return Invalid(text, status=status, reason=reason)
    if status == 0 or status == 429 or status >= 500:
        return Unavailable(text, status=status, reason=reason)
    return KubeError(text, status=status, reason=reason)
