"""API errors as the real server reports them: a v1 Status with code, reason and field causes."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """One failed request; `status()` is the body the server answers with."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        """The v1 Status object the client turns into an ApiException."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if not self.reason:  # some of the real server's 500s have none
            del body["reason"]
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(kind: str, name: str, group: str) -> dict[str, Any]:
    # The real server leaves out an empty group (the core API), as Go's omitempty does.
    return {"name": name, "group": group, "kind": kind} if group else {"name": name, "kind": kind}


def not_found(*, plural: str, group: str, name: str) -> ApiError:
    resource = f"{plural}.{group}" if group else plural
    return ApiError(
        404, "NotFound", f'{resource} "{name}" not found', details=_details(plural, name, group)
    )


def already_exists(*, plural: str, group: str, name: str) -> ApiError:
    resource = f"{plural}.{group}" if group else plural
    return ApiError(
        409,
        "AlreadyExists",
        f'{resource} "{name}" already exists',
        details=_details(plural, name, group),
    )


def conflict(*, plural: str, group: str, name: str) -> ApiError:
    resource = f"{plural}.{group}" if group else plural
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        details=_details(plural, name, group),
    )


def invalid(*, kind: str, group: str, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Unprocessable Entity; `causes` are (field path, message) pairs."""
    details = _details(kind, name, group)
    details["causes"] = [_cause(field, message) for field, message in causes]
    # As Go's aggregated field errors print: one bare, several in brackets.
    summary = ", ".join(f"{c['field']}: {c['message']}" for c in details["causes"])
    if len(details["causes"]) > 1:
        summary = f"[{summary}]"
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details=details)


#: Message prefixes of the real server's field errors, and their cause reasons.
_REASONS = (
    ("Required value", "FieldValueRequired"),
    ("Invalid value (type): ", "FieldValueTypeInvalid"),
    ("Forbidden", "FieldValueForbidden"),
    ("Too many", "FieldValueTooMany"),
    ("Too long", "FieldValueTooLong"),
    ("Duplicate value", "FieldValueDuplicate"),
    ("Unsupported value", "FieldValueNotSupported"),
    ("unknown field", "FieldValueUnknown"),
)


#: Cause reasons after which the real server does not run a CRD's CEL rules.
_BLOCKING = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)


def blocks_cel(message: str) -> bool:
    """Whether a cause with this message keeps the real server from evaluating CEL rules."""
    return _cause("", message)["reason"] in _BLOCKING


def _cause(field: str, message: str) -> dict[str, str]:
    for prefix, reason in _REASONS:
        if message.startswith(prefix):
            if prefix.endswith("(type): "):  # a type error, worded as any invalid value
                message = "Invalid value: " + message.removeprefix(prefix)
            return {"reason": reason, "message": message, "field": field}
    if message.startswith("Invalid value: "):
        return {"reason": "FieldValueInvalid", "message": message, "field": field}
    return {"reason": "FieldValueInvalid", "message": f"Invalid value: {message}", "field": field}


def unknown_fields(*, kind: str, version: str, paths: list[str]) -> ApiError:
    """400 for fields the schema does not know, as fieldValidation=Strict answers (the decoder
    refuses the object before any validation)."""
    listed = ", ".join(f'unknown field "{path}"' for path in paths)
    return bad_request(
        f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding error: '
        f"{listed}"
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def unavailable(message: str) -> ApiError:
    return ApiError(503, "ServiceUnavailable", message)
