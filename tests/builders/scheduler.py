"""A scheduler core that has observed objects, and the answers tests read from it."""

from __future__ import annotations

from typing import Any

from draflow.events.api.resource_v1 import DeviceRequestAllocationResult
from draflow.services.scheduler.framework import ClaimBinding, Scheduler, SchedulerConfig, ScheduleResult
from draflow.services.scheduler.plugins import default_plugins
from tests.builders.core import make_node
from tests.builders.resource import make_class, make_slice


def cluster(*objects: object, config: SchedulerConfig | None = None, clock: Any = None) -> Scheduler:
    """A Scheduler (the default plugins) that has observed ``objects`` (in order)."""
    core = Scheduler(config or SchedulerConfig(), plugins=default_plugins(), clock=clock or (lambda: 0.0))
    for obj in objects:
        core.observe(obj)
    return core


def gpu_cluster(
    nodes: int, devices: int = 10, config: SchedulerConfig | None = None, **node_kw: Any
) -> Scheduler:
    """``nodes`` nodes named node-000.. with ``devices`` GPUs each and the ``gpu`` class."""
    objs: list[object] = [make_class()]
    for i in range(nodes):
        name = f"node-{i:03d}"
        objs.append(make_node(name, **node_kw))
        objs.append(make_slice(name, devices))
    return cluster(*objs, config=config)


def results_of(binding: ClaimBinding) -> tuple[DeviceRequestAllocationResult, ...]:
    """The device results a binding writes (it must carry an allocation)."""
    assert binding.allocation is not None
    return binding.allocation.devices.results


def next_result(core: Scheduler) -> ScheduleResult:
    """``schedule_next`` for tests that know a pod is ready."""
    step = core.schedule_next()
    assert step is not None
    return step[1]
