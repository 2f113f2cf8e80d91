from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodePrepareResourcesRequest(_message.Message):
    __slots__ = ("claims",)
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedCompositeFieldContainer[Claim]
    def __init__(self, claims: _Optional[_Iterable[_Union[Claim, _Mapping]]] = ...) -> None: ...

class NodePrepareResourcesResponse(_message.Message):
    __slots__ = ("claims",)
    class ClaimsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: NodePrepareResourceResponse
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[NodePrepareResourceResponse, _Mapping]] = ...) -> None: ...
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.MessageMap[str, NodePrepareResourceResponse]
    def __init__(self, claims: _Optional[_Mapping[str, NodePrepareResourceResponse]] = ...) -> None: ...

class NodePrepareResourceResponse(_message.Message):
    __slots__ = ("cdi_devices", "error")
    CDI_DEVICES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    cdi_devices: _containers.RepeatedScalarFieldContainer[str]
    error: str
    def __init__(self, cdi_devices: _Optional[_Iterable[str]] = ..., error: _Optional[str] = ...) -> None: ...

class NodeUnprepareResourcesRequest(_message.Message):
    __slots__ = ("claims",)
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.RepeatedCompositeFieldContainer[Claim]
    def __init__(self, claims: _Optional[_Iterable[_Union[Claim, _Mapping]]] = ...) -> None: ...

class NodeUnprepareResourcesResponse(_message.Message):
    __slots__ = ("claims",)
    class ClaimsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: NodeUnprepareResourceResponse
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[NodeUnprepareResourceResponse, _Mapping]] = ...) -> None: ...
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    claims: _containers.MessageMap[str, NodeUnprepareResourceResponse]
    def __init__(self, claims: _Optional[_Mapping[str, NodeUnprepareResourceResponse]] = ...) -> None: ...

class NodeUnprepareResourceResponse(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: str
    def __init__(self, error: _Optional[str] = ...) -> None: ...

class Claim(_message.Message):
    __slots__ = ("namespace", "uid", "name", "resource_handle")
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_HANDLE_FIELD_NUMBER: _ClassVar[int]
    namespace: str
    uid: str
    name: str
    resource_handle: str
    def __init__(self, namespace: _Optional[str] = ..., uid: _Optional[str] = ..., name: _Optional[str] = ..., resource_handle: _Optional[str] = ...) -> None: ...
