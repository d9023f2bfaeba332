"""CEL runtime errors keep the pod pending (issue 23 item 2).

Upstream's DRA Filter runs the allocator on every node the scheduler filters; a selector that
fails at runtime on one node's devices (it reads an attribute they lack, without ``has()``)
makes the allocator return an error there, and a Filter error aborts the whole attempt
(``PodScheduled=False``, reason ``SchedulerError``), even when another node would have fit.
The plugin's unit test is upstream's "CEL-runtime-error-for-subset-of-nodes"; the e2e test is
``tests/e2e/test_upstream_dra.py::test_keeps_pod_pending_because_of_cel_runtime_errors``.
"""

from __future__ import annotations

import pytest

from draflow.services.scheduler.framework import Reserved, SchedulingError
from tests.builders import (
    DRIVER,
    exact,
    make_class,
    make_device,
    make_node,
    make_slice,
    pod_with_template_claim,
)
from tests.builders.scheduler import cluster

EXISTS = f'device.attributes["{DRIVER}"].exists'
# Kubernetes' DRA CEL environment appends this hint to a "no such key" error
HINT = (
    "consider using CEL optional chaining (.? followed by orValue()) or guarding the check with has() "
    "for optional fields"
)


def _cluster(
    nodes: int = 2, *, broken: tuple[int, ...] = (1,), expression: str | None = None
) -> list[object]:
    """Nodes node-000.. with one device each; the devices of ``broken`` nodes lack ``exists``
    (upstream's e2e slices: ``healthy`` and ``exists`` on the first node, ``healthy`` only on the
    second)."""
    objs: list[object] = [make_class("gpu", selectors=None if expression is None else [expression])]
    for i in range(nodes):
        name = f"node-{i:03d}"
        attrs = {"healthy": i not in broken} if i in broken else {"healthy": True, "exists": True}
        node = make_node(name, labels={"zone": "b" if i in broken else "a"})
        objs += [node, make_slice(name, [make_device("dev-0", **attrs)])]
    return objs


@pytest.mark.parametrize("name", [f"p{i}" for i in range(6)])  # several walk start offsets
def test_cel_runtime_error_for_subset_of_nodes(name: str) -> None:
    pod, claim = pod_with_template_claim(name, exact(selectors=[EXISTS]))
    core = cluster(*_cluster(), claim)
    result = core.schedule(pod)
    assert isinstance(result, SchedulingError), result
    assert result.plugin == "DynamicResources"
    assert result.message == (
        f'running "DynamicResources" filter plugin: claim default/{name}-gpu: selector #0: '
        f"CEL runtime error: no such key: exists. {HINT}"
    )


def test_no_error_anywhere_schedules() -> None:
    pod, claim = pod_with_template_claim("p", exact(selectors=[EXISTS]))
    core = cluster(*_cluster(broken=()), claim)
    assert isinstance(core.schedule(pod), Reserved)


def test_has_guard_avoids_the_error() -> None:
    guarded = f'has(device.attributes["{DRIVER}"].exists) && {EXISTS}'
    pod, claim = pod_with_template_claim("p", exact(selectors=[guarded]))
    core = cluster(*_cluster(), claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved) and result.node_name == "node-000"


def test_error_on_one_node_of_many() -> None:
    """The best-fit index cannot order nodes whose devices fail a selector: the walk samples every
    node (fewer than 100) and the allocator runs on the failing one too."""
    pod, claim = pod_with_template_claim("p", exact(selectors=[EXISTS]))
    core = cluster(*_cluster(12, broken=(7,)), claim)
    result = core.schedule(pod)
    assert isinstance(result, SchedulingError) and "CEL runtime error" in result.message


def test_node_rejected_by_an_earlier_filter_is_not_asked() -> None:
    """A node NodeAffinity rejects never reaches the DRA Filter upstream, so its devices' errors
    do not matter."""
    pod, claim = pod_with_template_claim("p", exact(selectors=[EXISTS]), node_selector={"zone": "a"})
    core = cluster(*_cluster(), claim)
    result = core.schedule(pod)
    assert isinstance(result, Reserved) and result.node_name == "node-000"


def test_class_selector_error_names_the_class() -> None:
    pod, claim = pod_with_template_claim("p", exact())
    core = cluster(*_cluster(expression=f'device.driver == "{DRIVER}" && {EXISTS}'), claim)
    result = core.schedule(pod)
    assert isinstance(result, SchedulingError)
    assert result.message == (
        f'running "DynamicResources" filter plugin: class gpu: selector #0: CEL runtime error: '
        f"no such key: exists. {HINT}"
    )
