"""The resource handle: written by the controller and the what-if, read by the node plugin."""

from __future__ import annotations

import json

import pytest

from drasat.api import handles
from drasat.api.nas import AllocatedDevices, ClaimInfo

INFO = ClaimInfo(namespace="ns", name="c", uid="u-1")
ENTRY = AllocatedDevices.model_validate(
    {"claimInfo": INFO.dump(), "gpu": {"devices": [{"uuid": "GPU-1"}]}, "optional": True}
)


def test_the_handle_is_the_nas_entry_without_claim_info_plus_the_node() -> None:
    data = json.loads(handles.encode("node-1", ENTRY))
    assert data == {"node": "node-1", "gpu": {"devices": [{"uuid": "GPU-1"}]}, "optional": True}


def test_decode_gives_back_the_entry_for_the_claim() -> None:
    assert handles.decode(handles.encode("node-1", ENTRY), INFO) == ENTRY


@pytest.mark.parametrize(
    ("data", "message"),
    [("{", "not valid JSON"), ("[1]", "not a JSON object"), ('{"gpu": 3}', "gpu")],
)
def test_bad_handles_are_value_errors(data: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        handles.decode(data, INFO)
