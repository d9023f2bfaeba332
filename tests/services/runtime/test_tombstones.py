"""A deleted object leaves nothing in the object fold once the log is folded past it, and its name
can be created again: the create asks the log for the subject's last sequence (a real server)."""

from __future__ import annotations

import pytest

from draflow.events.objects import object_applied
from draflow.infra.errors import ConcurrencyError
from draflow.infra.eventstore import EventStore
from draflow.services.apiserver.server import ApiServer
from draflow.services.runtime.client import ApiClient
from draflow.services.runtime.store import ApiStore
from tests.services.apiserver.test_quota import CLASS, claim


async def _settled(apiserver: ApiServer, events: EventStore) -> None:
    await apiserver.store.wait_position(await events.stream_last_seq())


async def test_deleted_names_leave_nothing_and_are_created_again(
    api: ApiClient, apiserver: ApiServer, event_store: EventStore
) -> None:
    assert [r.error for r in await api.apply([CLASS])] == [None]
    await _settled(apiserver, event_store)
    index = apiserver.store.index
    fresh = index.sizes()
    names = [f"c{i}" for i in range(5)]
    first = await api.apply([claim(n, 1) for n in names])
    assert [r.outcome for r in first] == ["created"] * 5
    await api.delete([("ResourceClaim", "default", n) for n in names])
    await _settled(apiserver, event_store)
    assert index.sizes() == fresh  # no version, tombstone or namespace count left behind
    assert index.version("ResourceClaim", "default", "c0") == 0

    # pipelined creates of names that had a life (the apiserver's append_many)
    again = await api.apply([claim(n, 1) for n in names])
    assert [r.outcome for r in again] == ["created"] * 5, again
    assert all(int(b.resource_version) > int(a.resource_version) for a, b in zip(first, again, strict=True))
    # one create on its own (ApiStore.append, the version taken from the fold)
    await api.delete([("ResourceClaim", "default", "c0")])
    await _settled(apiserver, event_store)
    [one] = await api.apply([claim("c0", 2)])
    assert one.outcome == "created", one
    stored = await api.get("ResourceClaim", "c0", namespace="default")
    assert stored["spec"]["devices"]["requests"][0]["exactly"]["count"] == 2


async def test_a_create_over_a_live_object_still_conflicts(
    api: ApiClient, apiserver: ApiServer, event_store: EventStore
) -> None:
    """Asking the log is only for names whose life is over in this fold: a create (expected 0)
    over an object that exists, or one this fold has not caught up with, is a conflict."""
    [created] = await api.apply([CLASS])
    assert created.error is None
    await _settled(apiserver, event_store)
    store = apiserver.store
    dc = store.index.get("DeviceClass", "", "gpu.example.com")
    assert dc is not None
    with pytest.raises(ConcurrencyError):
        await store.append("DeviceClass", "", "gpu.example.com", [object_applied(dc)], expected_last_seq=0)
    # a name deleted and created again behind the back of a fold that stopped following: the
    # fold has not seen the new life, so its create must not overwrite it
    behind = ApiStore(event_store)
    await behind.start(timeout_s=10)
    await behind.stop()
    other = await EventStore.open(event_store.settings, "other")
    try:
        subject = store.subject("DeviceClass", "", "later")
        await other.append(subject, [object_applied(dc)], expected_last_seq=0)
        with pytest.raises(ConcurrencyError):
            await behind.append("DeviceClass", "", "later", [object_applied(dc)])
    finally:
        await other.close()
