"""Example drivers: parameters, allocation books, unsuitable nodes, node plugins, entry points."""

from __future__ import annotations

import json
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from events.api import classic_v1alpha1 as cv
from events.api.meta import ObjectMeta
from services.dra.classic import claims as cl
from services.dra.classic.plugin import (
    ENTRY_POINT_GROUP,
    AllocationResult,
    ClaimAllocation,
    ControllerPlugin,
    Failure,
    Freed,
    InProgress,
    Parameters,
    PluginLoadError,
    declared_entry_points,
    load_plugins,
)
from services.dra.kubeletplugin import DRAPlugin
from services.dra.resourceclaim import ClaimRef
from services.drivers.acme_gpu import AcmeGpuController, AcmeGpuNodePlugin, GpuInfo
from services.drivers.acme_gpu import parse_parameters as acme_params
from services.drivers.fpga_example import FpgaController, FpgaNodePlugin
from services.drivers.fpga_example import parse_parameters as fpga_params
from services.drivers.fpga_example.controller import FABRIC_LABEL
from tests.classic.sim import node

ROOT = Path(__file__).resolve().parents[2]


def claim(name: str, params: object, cls: str = "c") -> cv.ResourceClaim:
    return cv.ResourceClaim(
        metadata=ObjectMeta(name=name, namespace="default", uid=f"uid-{name}"),
        spec=cv.ResourceClaimSpec(resource_class_name=cls, parameters=params, allocation_mode=cv.DELAYED),
        status=cv.ResourceClaimStatus(phase=cv.PENDING, user_limit=1),
    )


ACME_CLASS = cv.ResourceClass(metadata=ObjectMeta(name="acme-gpu"), driver_name="gpu.acme.com")
FPGA_CLASS = cv.ResourceClass(metadata=ObjectMeta(name="fpga"), driver_name="fpga.example.com")


def p(claim_params: object, class_params: object = None) -> Parameters:
    return Parameters(class_parameters=class_params, claim_parameters=claim_params)


def test_parameter_errors_are_one_line() -> None:
    assert fpga_params(None, {"bitstream": "x.bit", "memroy": "1Gi"}) == (
        "claim parameters: unknown field 'memroy' (known: bitstream, memory, users)"
    )
    assert fpga_params(None, {}) == "claim parameters.bitstream: required (path or URL of the FPGA image)"
    assert fpga_params(None, {"bitstream": "a.bit", "users": 0}) == (
        "claim parameters.users: must be -1 (unlimited) or a positive integer"
    )
    assert fpga_params({"fabricLabel": ""}, {"bitstream": "a.bit"}) == (
        "class parameters.fabricLabel: must be a non-empty string"
    )
    assert (
        acme_params(None, {"memory": "-2Gi"}) == "claim parameters.memory: '-2Gi' must be greater than zero"
    )
    assert acme_params({"initCommand": "run"}, {"memory": "2Gi"}) == (
        "class parameters.initCommand: must be a list of strings"
    )
    assert acme_params(None, {"memory": "lots"}).startswith("claim parameters.memory: quantities must match")  # type: ignore[union-attr]
    ok = acme_params({"initCommand": ["a"]}, {"memory": "2048Mi"})
    assert not isinstance(ok, str) and ok.memory == "2Gi"


def test_acme_packs_first_fit_and_is_idempotent() -> None:
    acme = AcmeGpuController()
    acme.observe(AcmeGpuNodePlugin(node_name="n1", gpus=[GpuInfo(name="gpu-0", memory="4Gi")]).capacity())
    a, b, c = (claim(x, {"memory": "2Gi"}) for x in "abc")
    ra = acme.allocate(a, ACME_CLASS, p({"memory": "2Gi"}), "n1")
    assert isinstance(ra, AllocationResult) and ra.attributes == {
        "node": "n1",
        "gpu": "gpu-0",
        "memory": "2Gi",
    }
    assert acme.allocate(a, ACME_CLASS, p({"memory": "2Gi"}), "n1") == ra  # repeated step: same answer
    assert isinstance(acme.allocate(b, ACME_CLASS, p({"memory": "2Gi"}), "n1"), AllocationResult)
    assert acme.allocate(c, ACME_CLASS, p({"memory": "2Gi"}), "n1") == Failure(
        reason="node n1: no GPU with 2Gi free", definite=True
    )
    assert acme.allocate(c, ACME_CLASS, p({"memory": "2Gi"}), "n9") == Failure(
        reason="node n9 has no ACME GPUs", definite=True
    )
    assert acme.allocate(c, ACME_CLASS, p({"memory": "2Gi"}), None) == Failure(
        reason="no node has a GPU with 2Gi free"
    )
    assert acme.deallocate(a) == Freed()
    assert isinstance(acme.allocate(c, ACME_CLASS, p({"memory": "2Gi"}), None), AllocationResult)  # immediate


def test_acme_unsuitable_nodes_consider_all_claims_of_the_pod() -> None:
    acme = AcmeGpuController()
    for n, mem in (("n1", "3Gi"), ("n2", "4Gi")):
        acme.observe(AcmeGpuNodePlugin(node_name=n, gpus=[GpuInfo(name="gpu-0", memory=mem)]).capacity())
    cas = [
        ClaimAllocation(
            pod_claim_name=x,
            claim=claim(x, {"memory": "2Gi"}),
            resource_class=ACME_CLASS,
            parameters=p({"memory": "2Gi"}),
        )
        for x in ("a", "b")
    ]
    assert acme.unsuitable_nodes(None, cas, ["n1", "n2", "n3"]) == {"a": ("n1", "n3"), "b": ("n1", "n3")}
    assert acme.unsuitable_nodes(None, cas[:1], ["n1", "n2"]) == {"a": ()}


def test_acme_books_are_rebuilt_from_allocated_claims() -> None:
    acme = AcmeGpuController()
    cap = AcmeGpuNodePlugin(node_name="n1", gpus=[GpuInfo(name="gpu-0", memory="4Gi")]).capacity()
    acme.observe(cap)
    a = claim("a", {"memory": "2Gi"})
    result = acme.allocate(a, ACME_CLASS, p({"memory": "2Gi"}), "n1")
    assert isinstance(result, AllocationResult)
    stored = cl.allocated(a, "gpu.acme.com", result)
    restarted = AcmeGpuController()
    restarted.observe(cap)
    restarted.observe(stored)
    assert restarted.free_memory("n1") == acme.free_memory("n1")
    assert restarted.allocate(a, ACME_CLASS, p({"memory": "2Gi"}), "n1") == result
    assert restarted.deallocate(stored) == Freed()
    assert str(restarted.free_memory("n1")["gpu-0"]) == "4Gi"


def test_fpga_programming_reachability_and_memory() -> None:
    fpga = FpgaController(programming_steps=1)
    fpga.observe(node("n1"))
    fpga.observe(node("n2", **{FABRIC_LABEL: "true"}))
    params = p({"bitstream": "/x.bit", "memory": "12Gi"})
    a = claim("a", params.claim_parameters)
    assert fpga.allocate(a, FPGA_CLASS, params, "n1") == Failure(
        reason="node n1 cannot reach the FPGA fabric", definite=True
    )
    assert fpga.allocate(a, FPGA_CLASS, params, "n2") == InProgress(
        reason="programming /x.bit on fpga-2 (1/1)"
    )
    done = fpga.allocate(a, FPGA_CLASS, params, "n2")
    assert (
        isinstance(done, AllocationResult) and done.attributes["fpga"] == "fpga-2"
    )  # the only one with 12Gi
    b = claim("b", params.claim_parameters)
    assert fpga.allocate(b, FPGA_CLASS, params, None) == Failure(reason="all suitable FPGAs are in use")
    huge = p({"bitstream": "/x.bit", "memory": "64Gi"})
    assert fpga.allocate(b, FPGA_CLASS, huge, None) == Failure(
        reason="no FPGA has 64Gi of memory", definite=True
    )
    ca = ClaimAllocation(pod_claim_name="a", claim=a, resource_class=FPGA_CLASS, parameters=params)
    assert fpga.unsuitable_nodes(None, [ca], ["n1", "n2"]) == {"a": ("n1",)}


def test_fpga_programming_delay_is_time_based_and_changes_only_when() -> None:
    """With ``programming_delay_s`` the answer comes once that much clock time passed since the
    FPGA was picked; the FPGA chosen (and the result) is the same as without a delay."""
    now = [100.0]
    slow = FpgaController(programming_steps=0, programming_delay_s=2.0, clock=lambda: now[0])
    fast = FpgaController(programming_steps=0)
    params = p({"bitstream": "/x.bit", "memory": "12Gi"})
    a = claim("a", params.claim_parameters)
    first = slow.allocate(a, FPGA_CLASS, params, None)
    assert isinstance(first, InProgress) and "2.0s left" in first.reason
    assert slow.free_fpgas() == ["fpga-0", "fpga-1"]  # picked at once: nobody else gets it
    now[0] = 101.5
    assert isinstance(slow.allocate(a, FPGA_CLASS, params, None), InProgress)
    now[0] = 102.0
    done = slow.allocate(a, FPGA_CLASS, params, None)
    assert done == fast.allocate(a, FPGA_CLASS, params, None)
    assert isinstance(done, AllocationResult) and done.attributes["fpga"] == "fpga-2"
    assert slow.allocate(a, FPGA_CLASS, params, None) is done  # idempotent, no new delay


def test_node_plugins_prepare_with_cdi_and_refuse_what_they_cannot(tmp_path: Path) -> None:
    fpga = FpgaController(programming_steps=0)
    fpga.observe(node("n2", **{FABRIC_LABEL: "true"}))
    params = p({"bitstream": "/x.bit"})
    a = claim("a", params.claim_parameters)
    result = fpga.allocate(a, FPGA_CLASS, params, None)
    assert isinstance(result, AllocationResult)
    stored = cl.allocated(a, "fpga.example.com", result)
    on_fabric = FpgaNodePlugin(node_name="n2", node_labels={FABRIC_LABEL: "true"}, cdi_root=tmp_path)
    off_fabric = FpgaNodePlugin(node_name="n1", node_labels={})
    assert isinstance(on_fabric, DRAPlugin)
    ref = ClaimRef(namespace="default", uid="uid-a", name="a")
    assert off_fabric.node_prepare_resources([ref])["uid-a"].error.startswith("NOT_FOUND")
    off_fabric.observe(stored)
    assert (
        off_fabric.node_prepare_resources([ref])["uid-a"].error
        == "resource claim default/a is not available on n1"
    )
    on_fabric.observe(stored)
    first = on_fabric.node_prepare_resources([ref])["uid-a"]
    assert first.devices[0].cdi_device_ids == ("fpga.example.com/fpga=uid-a",)
    spec = json.loads((tmp_path / "fpga.example.com-fpga_uid-a.json").read_text())
    assert spec["devices"][0]["containerEdits"]["env"] == ["FPGA_DEVICE=fpga-0", "FPGA_BITSTREAM=/x.bit"]
    assert on_fabric.node_prepare_resources([ref])["uid-a"] == first  # idempotent
    assert on_fabric.node_unprepare_resources([ref]) == {"uid-a": None}
    assert not (tmp_path / "fpga.example.com-fpga_uid-a.json").exists()
    assert on_fabric.node_unprepare_resources([ref]) == {"uid-a": None}  # idempotent
    on_fabric.observe(a)  # pending claim
    assert on_fabric.node_prepare_resources([ref])["uid-a"].error == (
        "resource claim default/a is not allocated by fpga.example.com"
    )


def _declared() -> list[EntryPoint]:
    eps = declared_entry_points(ROOT / "pyproject.toml")
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert {e.name for e in eps} == set(data["project"]["entry-points"][ENTRY_POINT_GROUP])
    return eps


def test_entry_points_declared_in_pyproject_load() -> None:
    plugins = load_plugins(available=_declared(), options={"fpga.example.com": {"programming_steps": 0}})
    assert sorted(plugins) == ["fpga.example.com", "gpu.acme.com"]
    assert all(isinstance(x, ControllerPlugin) for x in plugins.values())
    with pytest.raises(PluginLoadError, match=r"no entry point in draflow\.classic_drivers"):
        load_plugins(["gpu.example.com"], available=_declared())
    with pytest.raises(PluginLoadError, match=r"gpu\.acme\.com takes no options"):
        load_plugins(["gpu.acme.com"], available=_declared(), options={"gpu.acme.com": {"x": 1}})
    wrong = EntryPoint(
        name="other.example.com", value="services.drivers.acme_gpu.controller:create_plugin", group="g"
    )
    with pytest.raises(PluginLoadError, match=r"plugin reports driver 'gpu\.acme\.com'"):
        load_plugins(available=[wrong])
