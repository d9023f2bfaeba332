"""Device-plugin devices: stable ids, assignment (init containers' devices reused, sidecars' kept),
admission refusal, release, checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from draflow.events.api.core_v1 import Container
from draflow.services.kubelet.devices import (
    DeviceCheckpointError,
    DeviceManager,
    DevicesUnavailable,
    decode_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from tests.builders import make_container, make_pod

pytestmark = pytest.mark.kep3695

GPU = "example.com/gpu"


def _ctr(name: str, n: int, sidecar: bool = False) -> Container:
    """A container with ``n`` device-plugin GPUs."""
    return make_container(name, limits={GPU: n}, sidecar=sidecar)


def test_ids_assignment_and_release() -> None:
    m = DeviceManager({GPU: 3, "other.com/nic": 1})
    assert m.registered == {"example.com/gpu": ["gpu-0", "gpu-1", "gpu-2"], "other.com/nic": ["nic-0"]}
    a = make_pod("a", containers=[_ctr("x", 1), _ctr("y", 1)])
    assert m.allocate(a) and not m.allocate(a)  # idempotent
    assert m.container_devices("uid-a", "x") == [(GPU, ("gpu-0",))]
    assert m.cdi_devices("uid-a", "y") == ["example.com/gpu=gpu-1"]
    b = make_pod("b", containers=[_ctr("z", 2)])
    with pytest.raises(
        DevicesUnavailable, match=r"unavailable for example.com/gpu. Requested: 2, Available: 1"
    ):
        m.allocate(b)
    assert not m.holds("uid-b")  # nothing assigned on refusal
    assert m.release("uid-a") and not m.release("uid-a")
    assert m.allocate(b) and m.container_devices("uid-b", "z") == [(GPU, ("gpu-0", "gpu-1"))]
    assert not m.allocate(make_pod("no-devices"))


def test_init_container_devices_are_reused_sidecar_devices_are_not() -> None:
    m = DeviceManager({GPU: 3})
    pod = make_pod(
        "p", containers=[_ctr("main", 1)], init_containers=[_ctr("init", 2), _ctr("side", 1, sidecar=True)]
    )
    m.allocate(pod)
    init, side, main = (m.container_devices("uid-p", c)[0][1] for c in ("init", "side", "main"))
    # as upstream's device manager: the sidecar may take a finished init container's device but
    # keeps it, so the main container gets the other one
    assert init == ("gpu-0", "gpu-1") and side == ("gpu-0",) and main == ("gpu-1",)


def test_checkpoint_round_trip_and_corruption(tmp_path: Path) -> None:
    m = DeviceManager({GPU: 2})
    m.allocate(make_pod("p", containers=[_ctr("c", 2)]))
    path = write_checkpoint(tmp_path, m)
    assert path == tmp_path / "device-plugins" / "kubelet_internal_checkpoint"
    restored = DeviceManager({GPU: 2}, read_checkpoint(tmp_path))
    assert restored.assignments() == m.assignments() and restored.holds("uid-p")
    assert DeviceManager({"else.com/x": 1}, read_checkpoint(tmp_path)).assignments() == []  # plugin gone
    assert read_checkpoint(tmp_path / "none") == []
    with pytest.raises(DeviceCheckpointError, match="corrupted"):
        decode_checkpoint(path.read_bytes().replace(b"gpu-1", b"gpu-9"))
    with pytest.raises(DeviceCheckpointError):
        decode_checkpoint(b"{")
