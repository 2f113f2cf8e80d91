"""The resource handle drasat puts in a claim's status.allocation.resourceHandles[].data.

It is the claim's NAS allocatedClaims entry without its claimInfo (the kubelet and the claim
already name the claim) plus the node it was allocated on, as compact JSON. The controller and
the what-if write it, the node plugin and the controller's restart repair read it back. Pure.
"""

from __future__ import annotations

import json
from typing import Any

from drasat.api.nas import AllocatedDevices, ClaimInfo

#: The size of one resource handle's data the API server accepts (ResourceHandleDataMaxSize).
MAX_HANDLE_BYTES = 16 * 1024


def encode(node: str, entry: AllocatedDevices) -> str:
    body = entry.dump()
    body.pop("claimInfo", None)
    return json.dumps({"node": node, **body}, sort_keys=True, separators=(",", ":"))


def decode(data: str, claim: ClaimInfo) -> AllocatedDevices:
    """The NAS entry a handle describes, for `claim`.

    Raises ValueError when it is not a JSON object and pydantic's ValidationError (a ValueError)
    when its fields are wrong. A full NAS entry (with claimInfo) is accepted too.
    """
    if len(data) > MAX_HANDLE_BYTES:
        raise ValueError(
            f"resource handle is {len(data):,} characters, over Kubernetes' limit of "
            f"{MAX_HANDLE_BYTES:,} (ResourceHandleDataMaxSize)"
        )
    try:
        body: Any = json.loads(data)
    except json.JSONDecodeError as error:
        raise ValueError(f"resource handle is not valid JSON: {error}") from None
    except RecursionError:
        raise ValueError("resource handle is not valid JSON: nested too deeply") from None
    except ValueError as error:  # an integer of more than 4,300 digits
        raise ValueError(f"resource handle is not valid JSON: {str(error)[:80]}") from None
    if not isinstance(body, dict):
        raise ValueError("resource handle is not a JSON object")
    body.pop("node", None)
    body.setdefault("claimInfo", claim.dump())
    return AllocatedDevices.model_validate(body)
