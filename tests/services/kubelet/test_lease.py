"""The kubelet's side, pure: its node Lease and the conditions it posts when it is back."""

from __future__ import annotations

from msgspec.structs import replace

from draflow.events.api.meta import OwnerReference
from draflow.services.kubelet.lease import lease_object, lease_outdated, renew_interval
from draflow.services.kubelet.node import is_ready, ready_status
from tests.builders import at, registered_node


def test_the_lease_a_kubelet_keeps() -> None:
    lease = lease_object("n1", at(1.5), 40, "uid-n1")
    assert (lease.metadata.name, lease.metadata.namespace) == ("n1", "kube-node-lease")
    assert lease.spec.holder_identity == "n1" and lease.spec.lease_duration_seconds == 40
    assert lease.spec.renew_time == "2026-01-01T00:00:01.500000Z"  # a MicroTime
    assert lease.metadata.owner_references == (
        OwnerReference(api_version="v1", kind="Node", name="n1", uid="uid-n1"),
    )
    assert lease_object("n1", at(0), 40).metadata.owner_references == ()  # no uid yet: no owner
    assert renew_interval(40) == 10 and renew_interval(2) == 0.5


def test_a_renewal_is_enough_unless_holder_duration_or_owner_is_wrong() -> None:
    lease = lease_object("n1", at(0), 40, "uid-n1")
    assert not lease_outdated(lease, "n1", 40, "uid-n1")
    assert lease_outdated(lease, "n1", 20, "uid-n1")
    assert lease_outdated(replace(lease, spec=replace(lease.spec, holder_identity="other")), "n1", 40)
    assert lease_outdated(lease_object("n1", at(0), 40), "n1", 40, "uid-n1")  # owner missing


def test_posting_ready_again_keeps_transition_times_that_did_not_change() -> None:
    lost = registered_node("a", ready="Unknown")
    status = ready_status(lost, at(100))
    by_type = {c.type: c for c in status.conditions}
    assert is_ready(replace(lost, status=status)) and not is_ready(lost)
    assert by_type["Ready"].last_transition_time == "2026-01-01T00:01:40Z"  # Unknown -> True
    assert by_type["Ready"].reason == "KubeletReady"
    assert by_type["MemoryPressure"].status == "False"
    assert by_type["MemoryPressure"].last_transition_time == "2026-01-01T00:00:00Z"  # unchanged
    assert {c.last_heartbeat_time for c in status.conditions} == {"2026-01-01T00:01:40Z"}
