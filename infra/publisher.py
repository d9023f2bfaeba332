"""Publishing to JetStream on the raw fast path: one request per message, atomic batches, acks.

The wire level below :class:`draflow.infra.eventstore.EventStore`: replies arrive on the connection's
shared raw inbox, acks are decoded with msgspec, and every failure becomes a typed error
(``StoreUnavailable`` when JetStream cannot answer, ``AppendError`` otherwise). Deciding what a
refusal *means* (a conflict, a retried append that had landed) stays in the event store.
"""

from __future__ import annotations

import asyncio
import os

import msgspec
import nats.errors

from draflow.infra.errors import AppendError, StoreUnavailable
from draflow.infra.nats_client import DraflowClient, RawInbox
from draflow.infra.reader import status_of

__all__ = [
    "ERR_BATCH_DUPLICATE_MSG_ID",
    "ERR_STREAM_NAME_IN_USE",
    "ERR_WRONG_LAST_SEQUENCE",
    "HDR_EXPECTED_LAST_SUBJECT_SEQ",
    "HDR_MSG_ID",
    "MAX_BATCH_EVENTS",
    "PubAck",
    "Publisher",
]

# JetStream error codes (the server's JSErrCode values); we never match on message text.
ERR_WRONG_LAST_SEQUENCE = 10071
ERR_STREAM_NAME_IN_USE = 10058
ERR_BATCH_DUPLICATE_MSG_ID = 10201

MAX_BATCH_EVENTS = 1000  # the server's limit on messages in one atomic batch

HDR_MSG_ID = "Nats-Msg-Id"
HDR_EXPECTED_LAST_SUBJECT_SEQ = "Nats-Expected-Last-Subject-Sequence"


class ApiErr(msgspec.Struct):
    code: int = 0
    err_code: int = 0
    description: str = ""


class PubAck(msgspec.Struct):
    stream: str = ""
    seq: int = 0
    duplicate: bool = False
    error: ApiErr | None = None
    count: int = 0


_ack_decoder = msgspec.json.Decoder(PubAck)


def new_batch_id() -> str:
    return os.urandom(12).hex()


class Publisher:
    """Sends messages and waits for their JetStream acks on the shared raw inbox."""

    def __init__(self, nc: DraflowClient, inbox: RawInbox) -> None:
        self.nc = nc
        self._inbox = inbox

    async def publish_batch(self, msgs: list[tuple[str, bytes, dict[str, str]]], wait_s: float) -> PubAck:
        """One atomic batch; each message on its own subject (an append's events and its guards)."""
        batch_id = new_batch_id()
        n = len(msgs)
        first_reply, first_token, first_fut = self._inbox.future()
        try:
            for i, (subject, payload, hdrs) in enumerate(msgs[:-1]):
                h = {**hdrs, "Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(i + 1)}
                await self.send(subject, payload, h, first_reply if i == 0 else "")
            subject, payload, hdrs = msgs[-1]
            h = {**hdrs, "Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(n), "Nats-Batch-Commit": "1"}
            ack = await self.request(subject, payload, h, wait_s)
            if ack.error is not None and first_fut.done():
                first = self.parse_ack(msgs[0][0], *first_fut.result())
                if first.error is not None:  # the start was refused: that is the real reason
                    return first
            return ack
        finally:
            self._inbox.cancel(first_token)

    async def send(self, subject: str, payload: bytes, headers: dict[str, str], reply: str) -> None:
        try:
            await self.nc.publish(subject, payload, reply=reply, headers=headers)
        except (nats.errors.ConnectionClosedError, nats.errors.OutboundBufferLimitError) as exc:
            raise StoreUnavailable(f"{subject}: cannot publish: {exc!r}") from None

    async def request(self, subject: str, payload: bytes, headers: dict[str, str], wait_s: float) -> PubAck:
        reply, token, fut = self._inbox.future()
        try:
            await self.send(subject, payload, headers, reply)
            data, hdrs = await asyncio.wait_for(fut, wait_s)
        except TimeoutError:
            raise StoreUnavailable(f"{subject}: no acknowledgement within {wait_s}s") from None
        finally:
            self._inbox.cancel(token)
        return self.parse_ack(subject, data, hdrs)

    @staticmethod
    def parse_ack(subject: str, data: bytes, hdrs: bytes | None) -> PubAck:
        if not data:
            status = status_of(hdrs)
            if status == b"503":
                raise StoreUnavailable(f"{subject}: no stream listening (JetStream down or stream missing)")
            if status:
                raise StoreUnavailable(f"{subject}: unexpected status {status.decode()} on publish")
            return PubAck()  # a zero-byte ack (the start of an atomic batch)
        try:
            return _ack_decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise AppendError(subject, 0, 0, f"unreadable ack {data[:200]!r}: {exc}") from None
