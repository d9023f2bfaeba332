"""The plugin's streaming reporters: woken by ``changed()``, a poll only where ``refresh_s`` asks
for one (device health), none for numeric capacity."""

from __future__ import annotations

import asyncio

import pytest

from draflow.events.api.numeric_v1alpha2 import NodeResourceInstance
from draflow.services.drivers.kubeletplugin.capacity import CapacityReporter
from draflow.services.drivers.kubeletplugin.streams import WakingReporter


def instance(count: int) -> NodeResourceInstance:
    return NodeResourceInstance(
        id="i", api_version="counter.dra.config.k8s.io/v1alpha1", kind="Capacity", data={"count": count}
    )


async def test_a_change_between_two_waits_is_not_lost() -> None:
    reporter = WakingReporter()
    with reporter.waiter() as wait:
        reporter.changed()  # while the stream was busy sending
        await asyncio.wait_for(wait(), 1)  # returns at once
        with pytest.raises(TimeoutError):  # and only once: the wake-up was used
            await asyncio.wait_for(wait(), 0.2)
    reporter.changed()  # a closed stream is no longer woken
    assert reporter._waiting == set()


async def test_refresh_s_wakes_a_stream_without_a_change() -> None:
    reporter = WakingReporter(refresh_s=0.05)
    with reporter.waiter() as wait:
        await asyncio.wait_for(wait(), 1)


async def test_the_capacity_stream_asks_the_driver_only_when_woken() -> None:
    """No timer: the driver is asked once at the start, then once per wake-up; an unchanged
    answer is not sent."""
    asked: list[int] = []
    count = 3

    def capacity() -> tuple[NodeResourceInstance, ...]:
        asked.append(count)
        return (instance(count),)

    reporter = CapacityReporter(capacity)
    assert reporter.refresh_s is None
    stream = reporter.stream()
    first = await asyncio.wait_for(anext(stream), 2)
    assert [i.data for i in first.instances] == [b'{"count":3}']
    following = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.5)
    assert asked == [3] and not following.done()  # nobody woke it: the driver was not asked again
    reporter.changed()
    await asyncio.sleep(0.2)
    assert asked == [3, 3] and not following.done()  # asked again, unchanged: nothing sent
    count = 1
    reporter.changed()
    second = await asyncio.wait_for(following, 2)
    assert [i.data for i in second.instances] == [b'{"count":1}'] and asked == [3, 3, 1]
    await stream.aclose()
    assert reporter._waiting == set()
