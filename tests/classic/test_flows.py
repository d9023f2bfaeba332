"""The KEP-3063 flows at decider level, with the real example drivers in an in-memory cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from events.api import classic_v1alpha1 as cv
from events.api.loader import parse_documents
from services.dra.classic import claims as cl
from services.dra.resourceclaim import ClaimRef
from services.driver_controller import controller as ctl
from services.drivers.acme_gpu import AcmeGpuController, AcmeGpuNodePlugin, GpuInfo
from services.drivers.fpga_example import FpgaController
from services.drivers.fpga_example.controller import FABRIC_LABEL
from tests.classic.sim import Cluster, node

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "classic"


def doc(name: str) -> Any:
    ((_, raw),) = parse_documents((EXAMPLES / name).read_text())
    return raw


def acme_cluster(gpus: dict[str, list[str]], **kw: Any) -> tuple[Cluster, AcmeGpuController]:
    acme = AcmeGpuController()
    nodes = [node(n) for n in sorted(gpus)]
    for n, mems in gpus.items():
        plugin = AcmeGpuNodePlugin(
            node_name=n, gpus=[GpuInfo(name=f"gpu-{i}", memory=m) for i, m in enumerate(mems)]
        )
        acme.observe(plugin.capacity())
    cluster = Cluster({"gpu.acme.com": acme}, nodes, **kw)
    cluster.apply(doc("acme-gpu-resourceclass.yaml"))
    return cluster, acme


def consumer(cluster: Cluster, name: str) -> None:
    raw = doc("device-consumer-pod.yaml")
    cluster.apply({**raw, "metadata": {"name": name}})


def test_device_consumer_runs_as_written_and_shares_a_gpu_until_full() -> None:
    cluster, acme = acme_cluster({"node-a": ["8Gi", "8Gi"]})
    for i in range(5):
        consumer(cluster, f"dc-{i}")
        assert cluster.converge(f"dc-{i}") == "bound to node-a"
    gpus = [cluster.claims[f"dc-{i}-gpu"].status.attributes["gpu"] for i in range(5)]
    assert gpus == ["gpu-0"] * 4 + ["gpu-1"]  # 2Gi claims share gpu-0 until its 8Gi are used
    claim = cluster.claims["dc-0-gpu"]
    assert claim.status.phase == cv.ALLOCATED
    assert claim.status.attributes["memory"] == "2Gi"
    assert (
        claim.status.attributes["initCommand"]
        == '["/usr/local/bin/acme-gpu-init", "--cluster", "my-cluster"]'
    )
    assert [r.name for r in claim.status.reserved_for] == ["dc-0"]
    assert claim.metadata.owner_references[0].name == "dc-0"
    assert cl.has_finalizer(claim, "gpu.acme.com")
    # the kubelet prepares it on the node: a CDI device per claim, env names GPU and slice
    nodeplugin = AcmeGpuNodePlugin(node_name="node-a", gpus=[])
    nodeplugin.observe(claim)
    ref = ClaimRef(namespace="default", uid=claim.metadata.uid, name=claim.metadata.name)
    (dev,) = nodeplugin.node_prepare_resources([ref])[claim.metadata.uid].devices
    assert dev.cdi_device_ids == ("gpu.acme.com/gpu=uid-dc-0-gpu",)
    assert acme.free_memory("node-a") == {"gpu-0": _q("0"), "gpu-1": _q("6Gi")}


def _q(v: str) -> Any:
    from events.quantity import Quantity

    return Quantity.parse(v)


def test_delayed_allocation_converges_through_unsuitable_nodes() -> None:
    cluster, _ = acme_cluster({"node-a": ["1Gi"], "node-b": [], "node-c": ["4Gi"]})
    consumer(cluster, "dc")
    assert cluster.converge("dc", wait_for_driver=True) == "bound to node-c"
    claim = cluster.claims["dc-gpu"]
    assert claim.status.attributes["node"] == "node-c"
    # the driver answered the published potential nodes before a node was selected: no failed attempt
    assert not [line for line in cluster.log if "failed" in line]
    assert cluster.answered["dc-gpu"] == ("node-a", "node-b", "node-c")


def test_driver_failure_on_the_selected_node_leads_to_another_node() -> None:
    cluster, _ = acme_cluster({"node-a": ["1Gi"], "node-b": [], "node-c": ["4Gi"]})
    consumer(cluster, "dc")
    # the scheduler selects before the driver answered (allowed by the KEP): node-a, then node-b fail
    assert cluster.converge("dc") == "bound to node-c"
    failures = [line for line in cluster.log if "failed at" in line]
    assert failures == [
        "dc-gpu: ClassicAllocation failed at allocate-and-record: node node-a: no GPU with 2Gi free",
        "dc-gpu: ClassicAllocation failed at allocate-and-record: node node-b: no GPU with 2Gi free",
    ]
    claim = cluster.claims["dc-gpu"]
    assert claim.status.phase == cv.ALLOCATED
    assert claim.status.scheduling is not None
    assert claim.status.scheduling.scheduler == cv.SchedulerSchedulingStatus()  # negotiation cleared


def fpga_cluster(**kw: Any) -> tuple[Cluster, FpgaController]:
    fpga = FpgaController(programming_steps=2)
    nodes = [
        node("node-a"),
        node("node-b", **{FABRIC_LABEL: "true"}),
        node("node-c", **{FABRIC_LABEL: "true"}),
    ]
    cluster = Cluster({"fpga.example.com": fpga}, nodes, **kw)
    cluster.apply(
        {"apiVersion": "cdi.k8s.io/v1alpha1", "metadata": {"name": "fpga"}, "driverName": "fpga.example.com"}
    )
    return cluster, fpga


def fpga_claim(cluster: Cluster, name: str, mode: str = "Immediate", **params: Any) -> None:
    cluster.apply(
        {
            "apiVersion": "cdi.k8s.io/v1alpha1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "resourceClassName": "fpga",
                "allocationMode": mode,
                "parameters": {"bitstream": "/images/aes.bit", **params},
            },
        }
    )


def pod_using(cluster: Cluster, pod: str, *claims: str, node_selector: dict[str, str] | None = None) -> None:
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod},
            "spec": {
                "nodeSelector": node_selector or {},
                "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims],
                "containers": [{"name": "app", "image": "app", "resources": {"claims": list(claims)}}],
            },
        }
    )


def test_immediate_allocation_constrains_the_nodes() -> None:
    cluster, _ = fpga_cluster()
    fpga_claim(cluster, "aes")
    pod_using(cluster, "p", "aes")
    assert cluster.schedule("p") == "unschedulable: unallocated immediate resourceclaim aes"
    cluster.driver_controller()  # finalizer first
    assert cl.has_finalizer(cluster.claims["aes"], "fpga.example.com")
    assert cluster.claims["aes"].status.phase == cv.PENDING
    cluster.driver_controller()  # allocation saga: programming takes two retries
    assert [line for line in cluster.log if "retry" in line] == [
        "aes: allocate-and-record: retry: programming /images/aes.bit on fpga-0 (1/2)",
        "aes: allocate-and-record: retry: programming /images/aes.bit on fpga-0 (2/2)",
    ]
    assert cluster.claims["aes"].status.attributes["fpga"] == "fpga-0"
    assert cluster.schedule("p") == "bound to node-b"  # node-a cannot reach the fabric
    pod_using(cluster, "q", "aes", node_selector={"zone": "a"})
    cluster.nodes["node-a"] = node("node-a", zone="a")
    assert cluster.schedule("q").startswith("unschedulable: resourceclaim aes is in use")


def test_programming_that_does_not_finish_compensates() -> None:
    cluster, fpga = fpga_cluster(retries=1)
    fpga_claim(cluster, "aes")
    cluster.driver_controller()
    cluster.driver_controller()
    claim = cluster.claims["aes"]
    assert claim.status.phase == cv.PENDING
    assert not cl.has_finalizer(claim, "fpga.example.com")  # removed after the definite end of the attempt
    assert fpga.free_fpgas() == ["fpga-0", "fpga-1", "fpga-2"]  # the half-programmed FPGA was freed


def test_user_limit_one_versus_unlimited() -> None:
    cluster, _ = fpga_cluster(retries=5)
    fpga_claim(cluster, "single")
    fpga_claim(cluster, "shared", users=-1)
    for _ in range(2):
        cluster.driver_controller()
    for c in ("single", "shared"):
        pod_using(cluster, f"{c}-1", c)
        pod_using(cluster, f"{c}-2", c)
    assert cluster.schedule("single-1") == "bound to node-b"
    assert cluster.schedule("single-2") == "unschedulable: resourceclaim single is in use (userLimit 1)"
    assert cluster.schedule("shared-1") == "bound to node-b"
    assert cluster.schedule("shared-2") == "bound to node-b"
    assert [r.name for r in cluster.claims["shared"].status.reserved_for] == ["shared-1", "shared-2"]


def test_reallocate_moves_a_delayed_claim() -> None:
    cluster, acme = acme_cluster({"node-a": ["4Gi"], "node-b": ["4Gi"]})
    cluster.nodes["node-a"] = node("node-a", zone="a")
    cluster.nodes["node-b"] = node("node-b", zone="b")
    cluster.apply(
        {
            "apiVersion": "cdi.k8s.io/v1alpha1",
            "kind": "ResourceClaim",
            "metadata": {"name": "g", "namespace": "default"},
            "spec": {"resourceClassName": "acme-gpu", "parameters": {"memory": "2Gi"}},
        }
    )
    pod_using(cluster, "first", "g")
    assert cluster.converge("first") == "bound to node-a"
    # the first pod ends: it leaves reservedFor (kubelet's job), the claim stays allocated on node-a
    from tests.classic.sim import sch

    cluster.write(sch.unreserve([cluster.claims["g"]], cluster.pods["first"])[0])
    pod_using(cluster, "second", "g", node_selector={"zone": "b"})
    assert cluster.schedule("second") == "unschedulable: reallocating g"
    assert cluster.claims["g"].status.phase == cv.REALLOCATE
    # no second deallocation while one runs
    assert cluster.schedule("second") == "unschedulable: resourceclaim g is being reallocated"
    assert cluster.converge("second") == "bound to node-b"
    assert cluster.claims["g"].status.attributes["node"] == "node-b"
    assert "g: ClassicReallocation done" in cluster.log
    assert acme.free_memory("node-a")["gpu-0"] == _q("4Gi")


def test_post_filter_picks_one_claim_at_a_time() -> None:
    cluster, _ = acme_cluster({"node-a": ["8Gi"], "node-b": ["8Gi"]})
    cluster.nodes["node-a"] = node("node-a", zone="a")
    cluster.nodes["node-b"] = node("node-b", zone="b")
    for name in ("g1", "g2"):
        cluster.apply(
            {
                "apiVersion": "cdi.k8s.io/v1alpha1",
                "kind": "ResourceClaim",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"resourceClassName": "acme-gpu", "parameters": {"memory": "2Gi"}},
            }
        )
    pod_using(cluster, "first", "g1", "g2")
    assert cluster.converge("first") == "bound to node-a"
    from tests.classic.sim import sch

    for upd in sch.unreserve([cluster.claims["g1"], cluster.claims["g2"]], cluster.pods["first"]):
        cluster.write(upd)
    pod_using(cluster, "second", "g1", "g2", node_selector={"zone": "b"})
    assert cluster.schedule("second") == "unschedulable: reallocating g1"
    assert cluster.claims["g2"].status.phase == cv.ALLOCATED
    assert cluster.converge("second") == "bound to node-b"


def test_deletion_waits_for_users_and_the_finalizer() -> None:
    cluster, fpga = fpga_cluster(retries=5)
    fpga_claim(cluster, "aes")
    cluster.driver_controller()
    cluster.driver_controller()
    pod_using(cluster, "p", "aes")
    assert cluster.schedule("p") == "bound to node-b"
    cluster.delete_claim("aes")
    claim = cluster.claims["aes"]  # still there: the driver's finalizer holds it
    assert ctl.sync_claim(claim, cluster.classes["fpga"], driver_name="fpga.example.com") == [
        ctl.Wait(reason="claim is being deleted but still reserved for Pod/p")
    ]
    from tests.classic.sim import sch

    cluster.write(sch.unreserve([claim], cluster.pods["p"])[0])
    cluster.driver_controller()
    assert "aes" not in cluster.claims
    assert "aes: ClassicTeardown done" in cluster.log
    assert fpga.free_fpgas() == ["fpga-0", "fpga-1", "fpga-2"]


def test_deleting_an_unallocated_claim_only_drops_the_finalizer() -> None:
    cluster, _ = fpga_cluster()
    fpga_claim(cluster, "aes", bitstream="/images/broken.txt")
    cluster.driver_controller()  # finalizer
    cluster.driver_controller()  # definite failure: bad parameters, finalizer removed again
    assert cluster.claims["aes"].metadata.finalizers == ()
    assert any("must end with one of" in line for line in cluster.log)
    cluster.write(cl.with_finalizer(cluster.claims["aes"], "fpga.example.com"))
    cluster.delete_claim("aes")
    cluster.driver_controller()
    assert "aes" not in cluster.claims


def test_fpga_examples_run() -> None:
    cluster, fpga = fpga_cluster(retries=5)
    for name in ("fpga-resourceclass.yaml", "fpga-inline-pod.yaml"):
        for _, raw in parse_documents((EXAMPLES / name).read_text()):
            cluster.apply(raw)
    assert cluster.converge("fpga-job") == "bound to node-b"
    claim = cluster.claims["fpga-job-fpga"]
    assert claim.status.attributes == {"fpga": "fpga-0", "bitstream": "/images/resnet50.bit", "memory": "8Gi"}
    for _, raw in parse_documents((EXAMPLES / "fpga-immediate-claim.yaml").read_text()):
        cluster.apply(raw)
    assert cluster.converge("encryptor") == "bound to node-b"
    assert cluster.claims["aes-accelerator"].status.attributes["fpga"] == "fpga-1"
    assert fpga.free_fpgas() == ["fpga-2"]


def test_unsuitable_nodes_account_for_all_claims_of_the_pod() -> None:
    """Two 2Gi claims fit on node-a one at a time but not together: the driver, asked for both
    at once, marks node-a unsuitable for both and the pod goes to node-b without a failure."""
    cluster, _ = acme_cluster({"node-a": ["3Gi"], "node-b": ["4Gi"]})
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "two"},
            "spec": {
                "resourceClaims": [
                    {
                        "name": n,
                        "template": {"resourceClassName": "acme-gpu", "parameters": {"memory": "2Gi"}},
                    }
                    for n in ("a", "b")
                ],
                "containers": [{"name": "c", "image": "i", "resources": {"claims": ["a", "b"]}}],
            },
        }
    )
    assert cluster.converge("two", wait_for_driver=True) == "bound to node-b"
    for name in ("two-a", "two-b"):
        assert cluster.claims[name].status.attributes["node"] == "node-b"
    assert not [line for line in cluster.log if "failed" in line]


def test_kubelet_admits_prepares_and_hands_out_cdi_devices() -> None:
    from services.kubelet.classic_admission import admit_on_node, container_devices, prepare_batches

    cluster, _ = acme_cluster({"node-a": ["8Gi"]})
    consumer(cluster, "dc")
    pod = cluster.pods["dc"]
    assert admit_on_node(pod, cluster.claims, cluster.nodes["node-a"]) == [
        "resourceclaim dc-gpu does not exist"
    ]
    cluster.claim_controller()
    assert admit_on_node(pod, cluster.claims, cluster.nodes["node-a"]) == [
        "resourceclaim dc-gpu is not allocated"
    ]
    assert cluster.converge("dc") == "bound to node-a"
    assert admit_on_node(pod, cluster.claims, cluster.nodes["node-a"]) == []
    assert admit_on_node(cluster.pods["dc"], cluster.claims, node("node-b")) == [
        "resourceclaim dc-gpu is not available on node node-b"
    ]
    batches = prepare_batches(pod, cluster.claims)
    assert list(batches) == ["gpu.acme.com"] and [r.name for r in batches["gpu.acme.com"]] == ["dc-gpu"]
    plugin = AcmeGpuNodePlugin(node_name="node-a", gpus=[GpuInfo(name="gpu-0", memory="8Gi")])
    plugin.observe(cluster.claims["dc-gpu"])
    prepared = plugin.node_prepare_resources(batches["gpu.acme.com"])
    assert container_devices(pod, cluster.claims, prepared) == {
        "workload": ("gpu.acme.com/gpu=uid-dc-gpu",),
        "monitor": ("gpu.acme.com/gpu=uid-dc-gpu",),
    }
    cluster.apply({**doc("device-consumer-pod.yaml"), "metadata": {"name": "intruder"}})
    other = cluster.pods["intruder"]
    stolen = {"intruder-gpu": cluster.claims["dc-gpu"]}
    assert admit_on_node(other, stolen, cluster.nodes["node-a"]) == [
        "resourceclaim intruder-gpu was not created for this pod"
    ]
