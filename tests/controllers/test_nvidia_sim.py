"""The simulated gpu.nvidia.com driver: node layouts, the published slice, the node plugin (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from events.api.loader import load_manifests
from events.api.resource_v1 import DeviceClass, ResourceClaim
from events.quantity import Quantity
from services.apiserver.admission import admit
from services.apiserver.admission.served import validate_object
from services.dra import cel
from services.dra.kubeletplugin import DRAPlugin
from services.dra.resourceclaim import ClaimRef
from services.dra.structured.selection import attribute_value
from services.drivers import cdi
from services.drivers.nvidia_sim import (
    DRIVER,
    LayoutError,
    NodeLayout,
    NvidiaGpuPlugin,
    node_devices,
    node_slice,
)
from tests.builders import make_allocation, make_claim

NVIDIA = Path(__file__).resolve().parents[1] / "data" / "realworld" / "NVIDIA__k8s-dra-driver-gpu"


def test_layout_full_gpus_then_mig_instances() -> None:
    devices = node_devices("n1", NodeLayout(3, mig_gpus=1))
    names = [d.name for d in devices]
    assert names == ["gpu-0", "gpu-1", *(f"gpu-2-mig-1g12gb-{j}" for j in range(7))]
    gpu0, mig0 = devices[0], devices[2]
    assert gpu0.attributes["type"].string == "gpu" and gpu0.attributes["index"].int_ == 0
    assert mig0.attributes["type"].string == "mig" and mig0.attributes["profile"].string == "1g.12gb"
    assert mig0.attributes["parentIndex"].int_ == 2
    assert (gpu0.attributes["uuid"].string or "").startswith("GPU-")
    assert (mig0.attributes["uuid"].string or "").startswith("MIG-")
    # deterministic per node and position, distinct otherwise
    assert node_devices("n1", NodeLayout(3, 1)) == devices
    assert node_devices("n2", NodeLayout(3, 1))[0].attributes["uuid"] != gpu0.attributes["uuid"]
    assert len({d.attributes["uuid"].string for d in devices}) == len(devices)


@pytest.mark.parametrize(
    ("gpus", "mig", "message"),
    [
        (2, 3, "--nvidia-mig-gpus 3: more than the node's 2 GPUs"),
        (-1, 0, "must be >= 0"),
        (19, 19, "133 devices: more than 128 do not fit one ResourceSlice"),
    ],
)
def test_impossible_layouts_are_refused(gpus: int, mig: int, message: str) -> None:
    with pytest.raises(LayoutError, match=message):
        NodeLayout(gpus, mig)


def test_the_slice_passes_validation() -> None:
    s = node_slice("n1", node_devices("n1", NodeLayout(8, 2)), node_uid="uid-1")
    admitted = admit(s)
    assert validate_object(admitted) == []
    assert s.metadata.name == "n1-gpu.nvidia.com" and s.spec.pool.name == "n1"
    assert s.metadata.owner_references[0].uid == "uid-1"


def _classes() -> dict[str, DeviceClass]:
    out: dict[str, DeviceClass] = {}
    for f in (
        "deployments__helm__dra-driver-nvidia-gpu__templates__deviceclasses.rendered.yaml",
        "demo__specs__extended-resources__mig-1g-12gb.yaml",
    ):
        for r in load_manifests(NVIDIA / f):
            if isinstance(r.obj, DeviceClass):
                out[r.obj.metadata.name] = r.obj
    return out


def test_nvidias_device_classes_select_gpus_and_mig_instances() -> None:
    devices = node_devices("n1", NodeLayout(2, 1))
    classes = _classes()
    selected: dict[str, list[str]] = {}
    for name in ("gpu.nvidia.com", "mig.nvidia.com", "mig-1g-12gb.gpu.nvidia.com", "vfio.gpu.nvidia.com"):
        programs = [cel.compile_expression(s.cel.expression) for s in classes[name].spec.selectors if s.cel]
        for d in devices:
            attrs = {k: attribute_value(a) for k, a in d.attributes.items()}
            capacity = {k: Quantity.parse(str(c.value)) for k, c in d.capacity.items()}
            inp = cel.prepare_device(DRIVER, attrs, capacity, None)
            if all(p.evaluate(inp) for p in programs):
                selected.setdefault(name, []).append(d.name)
    migs = [f"gpu-1-mig-1g12gb-{j}" for j in range(7)]
    assert selected == {
        "gpu.nvidia.com": ["gpu-0"],
        "mig.nvidia.com": migs,
        "mig-1g-12gb.gpu.nvidia.com": migs,
    }


def _plugin(tmp_path: Path, claims: dict[str, ResourceClaim]) -> NvidiaGpuPlugin:
    return NvidiaGpuPlugin(
        "n1",
        NodeLayout(2, 1),
        tmp_path / "cdi",
        lambda ref: claims.get(ref.uid),
        state_dir=tmp_path / "state",
    )


def test_plugin_prepares_with_cdi_specs_idempotently_and_unprepares(tmp_path: Path) -> None:
    alloc = make_allocation(("gpu", "gpu-0"), ("mig", "gpu-1-mig-1g12gb-3"), driver=DRIVER, pool="n1")
    claim = make_claim("c", uid="u1", requests=("gpu", "mig"), allocation=alloc)
    plugin = _plugin(tmp_path, {"u1": claim})
    assert isinstance(plugin, DRAPlugin)
    ref = ClaimRef(namespace="default", uid="u1", name="c")
    (result,) = plugin.node_prepare_resources([ref]).values()
    assert result.error == ""
    ids = {d.device_name: d.cdi_device_ids for d in result.devices}
    assert ids == {
        "gpu-0": ("k8s.gpu.nvidia.com/claim=u1-gpu-0",),
        "gpu-1-mig-1g12gb-3": ("k8s.gpu.nvidia.com/claim=u1-gpu-1-mig-1g12gb-3",),
    }
    assert [d.request_names for d in result.devices] == [("gpu",), ("mig",)]
    spec = cdi.read_spec(tmp_path / "cdi", "k8s.gpu.nvidia.com-claim_u1")
    assert spec is not None and spec["kind"] == "k8s.gpu.nvidia.com/claim"
    uuids = {d.name: d.attributes["uuid"].string for d in plugin.devices}
    assert [dev["containerEdits"]["env"] for dev in spec["devices"]] == [
        [f"NVIDIA_VISIBLE_DEVICES={uuids['gpu-0']}"],
        [f"NVIDIA_VISIBLE_DEVICES={uuids['gpu-1-mig-1g12gb-3']}"],
    ]
    # a restarted plugin remembers the claim and answers the same
    again = _plugin(tmp_path, {"u1": claim})
    assert again.prepared == {"u1"}
    assert again.node_prepare_resources([ref]) == {"u1": result}
    assert again.node_unprepare_resources([ref]) == {"u1": None}
    assert cdi.read_spec(tmp_path / "cdi", "k8s.gpu.nvidia.com-claim_u1") is None
    assert _plugin(tmp_path, {}).prepared == frozenset()
    assert again.node_unprepare_resources([ref]) == {"u1": None}  # unknown now: a no-op


@pytest.mark.parametrize(
    ("pool", "device", "error"),
    [
        ("n2", "gpu-0", "device n2/gpu-0 is not on node n1"),
        ("n1", "gpu-1", "device n1/gpu-1 is not on node n1"),  # gpu-1 is in MIG mode
    ],
)
def test_plugin_refuses_devices_it_does_not_have(tmp_path: Path, pool: str, device: str, error: str) -> None:
    claim = make_claim("c", uid="u1", allocation=make_allocation(("gpu", device), driver=DRIVER, pool=pool))
    plugin = _plugin(tmp_path, {"u1": claim})
    (result,) = plugin.node_prepare_resources([ClaimRef(namespace="default", uid="u1", name="c")]).values()
    assert result.error.endswith(error) and result.devices == ()
    assert plugin.prepared == frozenset()


def test_plugin_refuses_unknown_and_unallocated_claims(tmp_path: Path) -> None:
    plugin = _plugin(tmp_path, {"u2": make_claim("c2", uid="u2")})
    out = plugin.node_prepare_resources(
        [
            ClaimRef(namespace="default", uid="u1", name="c"),
            ClaimRef(namespace="default", uid="u2", name="c2"),
        ]
    )
    assert out["u1"].error.endswith("ResourceClaim not found")
    assert out["u2"].error.endswith("not allocated")
