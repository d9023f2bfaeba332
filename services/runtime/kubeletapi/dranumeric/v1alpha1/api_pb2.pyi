from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class NodeListAndWatchResourcesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeResourceInstance(_message.Message):
    __slots__ = ("id", "api_version", "kind", "data")
    ID_FIELD_NUMBER: _ClassVar[int]
    API_VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    id: str
    api_version: str
    kind: str
    data: bytes
    def __init__(self, id: _Optional[str] = ..., api_version: _Optional[str] = ..., kind: _Optional[str] = ..., data: _Optional[bytes] = ...) -> None: ...

class NodeListAndWatchResourcesResponse(_message.Message):
    __slots__ = ("instances",)
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    instances: _containers.RepeatedCompositeFieldContainer[NodeResourceInstance]
    def __init__(self, instances: _Optional[_Iterable[_Union[NodeResourceInstance, _Mapping]]] = ...) -> None: ...
