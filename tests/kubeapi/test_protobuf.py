"""Protobuf request bodies: what kubectl's typed generators send (create namespace|deployment|job)."""

from __future__ import annotations

import pytest

from services.apiserver.kubeapi.protobuf import MAGIC, ProtobufError, decode_body, fields
from services.runtime.client import ApiClient
from tests.kubeapi.conftest import Kube, http, kubectl


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def _field(number: int, value: bytes | int) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def test_decode_a_namespace_body() -> None:
    meta = _field(1, b"team") + _field(11, _field(1, b"a") + _field(2, b"b")) + _field(5, b"uid-ignored")
    raw = _field(1, meta) + _field(2, _field(1, b"kubernetes"))
    body = MAGIC + _field(1, _field(1, b"v1") + _field(2, b"Namespace")) + _field(2, raw)
    assert decode_body(body) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team", "labels": {"a": "b"}},
        "spec": {"finalizers": ["kubernetes"]},
    }
    assert fields(_field(3, 300) + _field(1, b"x")) == [(3, 300), (1, b"x")]
    with pytest.raises(ProtobufError, match="no k8s magic"):
        decode_body(b"{}")
    with pytest.raises(ProtobufError, match="'Service' are not supported"):
        decode_body(MAGIC + _field(1, _field(1, b"v1") + _field(2, b"Service")) + _field(2, b""))
    with pytest.raises(ProtobufError, match="truncated"):
        decode_body(MAGIC + b"\x0a\x05ab")


async def test_kubectl_create_generators(kube: Kube, api: ApiClient) -> None:
    out = await kubectl(kube, "create", "namespace", "team")
    assert out.out.strip() == "namespace/team created"
    await api.get("Namespace", "team")
    await kubectl(kube, "create", "deployment", "web", "--image=nginx", "--replicas=2", "-n", "team")
    dep = await api.get("Deployment", "web", namespace="team")
    assert dep["spec"]["replicas"] == 2 and dep["spec"]["selector"] == {"matchLabels": {"app": "web"}}
    (ctr,) = dep["spec"]["template"]["spec"]["containers"]
    assert (ctr["name"], ctr["image"]) == ("nginx", "nginx")
    await kubectl(kube, "create", "job", "j", "--image=busybox", "-n", "team", "--", "echo", "hi")
    job = await api.get("Job", "j", namespace="team")
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["echo", "hi"]
    code, _ = await http(
        kube,
        "POST",
        "/api/v1/namespaces",
        body=b"k8s\x00\x0a",
        content_type="application/vnd.kubernetes.protobuf",
    )
    assert code == 415
