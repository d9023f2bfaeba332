"""``draflow dlq``: dead letters from a real consumer listed, shown, retried and discarded."""

from __future__ import annotations

import asyncio
import json

from draflow.events.dra import PodBound, PodStarted
from draflow.events.envelope import Envelope, Event
from draflow.infra.config import Settings
from draflow.infra.consumer import ConsumerOptions, DurableConsumer, FunctionHandler
from draflow.infra.errors import PoisonEvent
from draflow.infra.eventstore import EventStore
from tests.helpers import assert_eventually
from tests.processes import draflow

FAST = ConsumerOptions(fetch_wait_s=0.1, retry_base_s=0.01, retry_max_s=0.05, max_deliver=3)


async def cli(settings: Settings, *args: str) -> tuple[int, str, str]:
    r = await asyncio.to_thread(draflow, settings, *args)
    return r.returncode, r.stdout, r.stderr


async def test_list_show_retry_discard(event_store: EventStore, settings: Settings) -> None:
    fixed = False
    handled: list[tuple[int, str]] = []

    async def handle(env: Envelope[Event]) -> None:
        if isinstance(env.data, PodBound) and env.data.node_name == "node-9" and not fixed:
            raise PoisonEvent("node node-9 does not exist")
        if isinstance(env.data, PodStarted):
            raise RuntimeError("kubelet unreachable")
        handled.append((env.seq, env.id))

    filters = [f"{settings.root}.ev.Pod.>"]
    consumer = DurableConsumer(event_store, "kubelet-x", filters, FunctionHandler(handle), FAST)
    stop = asyncio.Event()
    task = asyncio.create_task(consumer.run(stop))
    try:
        pod = event_store.subject("Pod", "default", "web")
        bound = PodBound(node_name="node-9")
        (s1,) = await event_store.append(pod, bound, expected_last_seq=0, msg_id="bind-web")
        await event_store.append(pod, PodStarted(), expected_last_seq=s1)

        async def two_letters() -> list[dict]:
            code, out, err = await cli(settings, "dlq", "list", "-o", "json")
            assert code == 0, err
            rows = [json.loads(x) for x in out.splitlines()]
            assert len(rows) == 2
            return rows

        rows = await assert_eventually(two_letters, timeout_s=20)
        first, second = rows
        assert (first["seq"], first["stream_seq"], first["subject"]) == (1, s1, pod)
        assert first["type"] == "PodBound" and first["consumer"] == "kubelet-x"
        assert first["reason"] == "PoisonEvent: node node-9 does not exist"
        assert second["reason"].startswith("gave up after 3 attempts: RuntimeError: kubelet unreachable")
        assert second["deliveries"] == 3 and first["status"] == ""

        code, out, _ = await cli(settings, "dlq", "list")
        assert out.splitlines()[0].split()[:3] == ["SEQ", "WHEN", "CONSUMER"]
        assert "PoisonEvent: node node-9 does not exist" in out.splitlines()[1]

        code, out, _ = await cli(settings, "dlq", "show", "1")
        assert code == 0
        assert out.startswith(f"dead letter 1: PodBound at {pod} (stream seq {s1})")
        assert '"node_name": "node-9"' in out and '"id": "bind-web"' in out

        # the bug is fixed: retry re-publishes the same envelope (same id) to the pod's subject
        fixed = True
        code, out, err = await cli(settings, "dlq", "retry", "1")
        assert code == 0, err
        assert out.strip() == "dead letter 1: re-published as stream seq 3"
        await assert_eventually(lambda: handled == [(3, "bind-web")])
        code, _, err = await cli(settings, "dlq", "retry", "1")
        assert code == 1 and "already retried as 3 (use --again" in err
        code, out, _ = await cli(settings, "dlq", "retry", "1", "--again")
        assert out.strip() == "dead letter 1: re-published as stream seq 4"
        await assert_eventually(lambda: [h[1] for h in handled] == ["bind-web", "bind-web"])
        rec = await event_store.last_record(pod)
        assert rec is not None and rec.header("Nats-Msg-Id") == "dlq-retry:1:2"
        assert rec.header("Draflow-Retry-Of") == str(s1)

        # discard: deleted while the stream allows it ...
        code, out, _ = await cli(settings, "dlq", "discard", "2")
        assert out.strip() == "dead letter 2: deleted"
        code, out, _ = await cli(settings, "dlq", "list", "-o", "json")
        assert [json.loads(x)["seq"] for x in out.splitlines()] == [1]
        # ... and marked when it denies deletes
        info = await event_store.js.stream_info(settings.dlq_stream)
        info.config.deny_delete = True
        await event_store.js.update_stream(info.config)
        code, out, _ = await cli(settings, "dlq", "discard", "1")
        assert out.strip() == "dead letter 1: marked discarded (the dead-letter stream denies deletes)"
        code, out, _ = await cli(settings, "dlq", "list", "-o", "json")
        (row,) = [json.loads(x) for x in out.splitlines()]
        assert row["status"] == "discarded"
        code, _, err = await cli(settings, "dlq", "retry", "1")
        assert code == 1 and err.strip() == "error: dead letter 1: discarded; nothing to retry"
        code, _, err = await cli(settings, "dlq", "show", "77")
        assert code == 1 and "dead letter 77: not found" in err
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
