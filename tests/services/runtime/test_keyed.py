"""Per-object syncs (``KeyedSyncs``): one at a time per key, a change while it runs syncs once
more, a bound on how many run at once, failures handed back, and a stop that cancels."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import pytest

from draflow.services.runtime.keyed import KeyedSyncs, SyncOne


async def test_a_key_submitted_while_its_sync_runs_is_synced_once_more_after_it() -> None:
    syncs = KeyedSyncs()
    gate = asyncio.Event()
    running = 0
    most = 0
    calls: list[str] = []

    def sync(label: str) -> SyncOne:
        async def one() -> None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            calls.append(label)
            await gate.wait()
            running -= 1

        return one

    syncs.submit("k", sync("first"))
    await asyncio.sleep(0)
    syncs.submit("k", sync("second"))  # while the first runs
    syncs.submit("k", sync("third"))  # replaces the second: one more sync, with the latest
    await asyncio.sleep(0)
    assert calls == ["first"] and syncs.busy("k")
    gate.set()
    await syncs.join()
    assert calls == ["first", "third"] and most == 1 and not syncs.busy("k")


async def test_other_keys_do_not_wait_for_a_slow_one_and_at_most_concurrency_run() -> None:
    syncs = KeyedSyncs(concurrency=2)
    slow = asyncio.Event()
    five_done = asyncio.Event()
    done: list[int] = []
    running = 0
    most = 0

    def sync(i: int) -> SyncOne:
        async def one() -> None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            if i == 0:
                await slow.wait()
            await asyncio.sleep(0)
            running -= 1
            done.append(i)
            if len(done) == 5:
                five_done.set()

        return one

    for i in range(6):
        syncs.submit(i, sync(i))
    async with asyncio.timeout(5):
        await five_done.wait()
    assert sorted(done) == [1, 2, 3, 4, 5] and most == 2  # key 0 holds one slot only
    slow.set()
    await syncs.join()
    assert done[-1] == 0 and syncs.started == 6


async def test_a_key_submitted_again_while_it_waits_for_a_slot_is_synced_once() -> None:
    syncs = KeyedSyncs(concurrency=1)
    gate = asyncio.Event()
    calls: list[str] = []

    def sync(label: str) -> SyncOne:
        async def one() -> None:
            calls.append(label)
            if label == "holder":
                await gate.wait()

        return one

    syncs.submit("a", sync("holder"))
    await asyncio.sleep(0)
    syncs.submit("b", sync("b1"))  # waits for the only slot
    syncs.submit("b", sync("b2"))  # still waiting: the one sync of b runs this
    await asyncio.sleep(0)
    gate.set()
    await syncs.join()
    assert calls == ["holder", "b2"]


async def test_a_failure_is_handed_back_and_the_other_keys_go_on() -> None:
    failed: list[tuple[Hashable, str]] = []
    syncs = KeyedSyncs(on_failure=lambda key, exc: failed.append((key, str(exc))))
    done: list[str] = []

    async def bad() -> None:
        raise RuntimeError("refused")

    async def good() -> None:
        done.append("good")

    syncs.submit("bad", bad)
    syncs.submit("good", good)
    await syncs.join()
    assert failed == [("bad", "refused")] and done == ["good"] and len(syncs) == 0


async def test_close_lets_syncs_finish_within_the_grace_then_cancels() -> None:
    syncs = KeyedSyncs()
    finished: list[str] = []
    forever = asyncio.Event()

    async def quick() -> None:
        await asyncio.sleep(0.01)
        finished.append("quick")

    async def stuck() -> None:
        await forever.wait()
        finished.append("stuck")

    syncs.submit("quick", quick)
    syncs.submit("stuck", stuck)
    await syncs.close(grace_s=0.5)
    assert finished == ["quick"] and len(syncs) == 0


@pytest.mark.parametrize("concurrency", [1, 3])
async def test_every_submitted_key_is_synced(concurrency: int) -> None:
    syncs = KeyedSyncs(concurrency=concurrency)
    seen: list[int] = []

    def sync(i: int) -> SyncOne:
        async def one() -> None:
            await asyncio.sleep(0)
            seen.append(i)

        return one

    for i in range(20):
        syncs.submit(i % 7, sync(i))
    await syncs.join()
    assert set(seen) >= {13, 14, 15, 16, 17, 18, 19}  # each key's last submission was synced
