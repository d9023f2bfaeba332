"""The foundation's saga engine, minus one read per saga: a saga this instance starts is not read
back from the log right after its ``SagaStarted`` append.

``SagaEngine.start`` appends ``SagaStarted`` and then ``run`` loads the saga from the log, one
round trip per pod that tells the starter nothing new. Here the state is folded from the event
just appended (same reducer, the stored sequence) and handed to ``run`` through ``load``. Any
other load (a conflict, a resume, another instance's saga) reads the log as before.
"""

from __future__ import annotations

import datetime
from typing import Any

from events.envelope import Envelope, Event
from events.saga import SagaStarted
from infra import tracing
from infra.errors import ConcurrencyError
from sagas.engine import SagaEngine, SagaState, pod_attributes
from sagas.state import apply

__all__ = ["SchedulerSagaEngine"]

_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


class SchedulerSagaEngine(SagaEngine):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fresh: dict[str, SagaState] = {}

    async def load(self, saga_id: str) -> SagaState | None:
        state = self._fresh.pop(saga_id, None)
        return state if state is not None else await super().load(saga_id)

    async def start(
        self,
        saga_type: str,
        saga_id: str,
        input: dict[str, Any] | None = None,
        *,
        decided_at_seq: int = 0,
        traceparent: str = "",
    ) -> SagaState:
        definition = self.definitions.get(saga_type)
        if definition is None:
            raise ValueError(f"unknown saga type {saga_type!r}")
        subject = self.subject(saga_id)
        event = SagaStarted(
            saga_type=saga_type,
            input=input or {},
            steps=[s.name for s in definition.steps],
            decided_at_seq=decided_at_seq,
        )
        attrs = {"draflow.saga.id": saga_id, "draflow.saga.type": saga_type, **pod_attributes(input or {})}
        with tracing.span(f"saga {saga_type}", traceparent=traceparent, attributes=attrs):
            try:
                (seq,) = await self.store.append(
                    subject,
                    event,
                    expected_last_seq=0,
                    msg_id=f"saga:{saga_id}:started",
                    correlation_id=saga_id,
                )
            except ConcurrencyError:
                # exists: resume as usual
                return await super().start(saga_type, saga_id, input, traceparent=traceparent)
            env: Envelope[Event] = Envelope(
                id="",
                type=SagaStarted.type_name(),
                schema=SagaStarted.SCHEMA,
                subject=subject,
                time=_EPOCH,
                data=event,
                traceparent=tracing.current_traceparent(),
                seq=seq,
            )
            state = apply(None, env)
            assert state is not None
            self._fresh[saga_id] = state
        return await self.run(saga_id)
