"""A faster drop-in for nats-py's protocol parser.

nats-py matches every control line against several regular expressions and deletes each consumed
message from the front of its buffer; replaying a stream spends most of its time there. This parser
finds control lines with ``bytes.find`` and ``split``, walks the buffer with an offset (compacting
once per read), and hands messages for raw subscriptions (``DraflowClient.raw_subscribe``) straight
to their sinks. Semantics are those of ``nats.protocol.parser.Parser``: same callbacks, same errors.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from nats.errors import ProtocolError
from nats.protocol.parser import MAX_CONTROL_LINE_SIZE, Parser

if TYPE_CHECKING:
    from draflow.infra.nats_client import DraflowClient

_CRLF = b"\r\n"
log = logging.getLogger(__name__)


def _msg_args(line: bytes, has_headers: bool) -> tuple[bytes, int, bytes, int, int]:
    """(subject, sid, reply, header length, total length) of a MSG/HMSG control line."""
    args = line.split()
    try:
        if has_headers:
            if len(args) == 6:
                return args[1], int(args[2]), args[3], int(args[4]), int(args[5])
            return args[1], int(args[2]), b"", int(args[3]), int(args[4])
        if len(args) == 5:
            return args[1], int(args[2]), args[3], 0, int(args[4])
        return args[1], int(args[2]), b"", 0, int(args[3])
    except (ValueError, IndexError):
        raise ProtocolError("nats: malformed MSG") from None


class FastParser(Parser):
    nc: DraflowClient

    def reset(self) -> None:
        super().reset()
        self._pending: tuple[bytes, int, bytes, int, int] | None = None

    async def parse(self, data: bytes = b"") -> None:
        buf = self.buf
        buf.extend(data)
        nc = self.nc
        sinks = nc._raw_sinks
        pos = 0
        end = len(buf)
        try:
            while pos < end:
                pending = self._pending
                if pending is None:
                    i = buf.find(_CRLF, pos)
                    if i < 0:
                        if end - pos > MAX_CONTROL_LINE_SIZE:
                            raise ProtocolError("nats: control line too long")
                        break
                    line = bytes(buf[pos:i])
                    op = line[:4]
                    if op == b"HMSG" or op[:3] == b"MSG":
                        self._pending = pending = _msg_args(line, op == b"HMSG")
                        pos = i + 2
                        continue
                    pos = i + 2
                    await self._control(line)
                    if self.buf is not buf:  # reset by a reconnect while we awaited
                        return
                    continue
                subject, sid, reply, hlen, total = pending
                if end - pos < total + 2:
                    break
                if hlen:
                    hdr: bytes | None = bytes(buf[pos : pos + hlen])
                    payload = bytes(buf[pos + hlen : pos + total])
                else:
                    hdr = None
                    payload = bytes(buf[pos : pos + total])
                pos += total + 2
                self._pending = None
                sink = sinks.get(sid)
                if sink is not None:
                    try:
                        sink(subject, reply, payload, hdr)
                    except Exception:  # a sink bug must not take the connection down
                        log.exception("raw sink for sid %d failed", sid)
                else:
                    await nc._process_msg(sid, subject, reply, payload, hdr)
                    if self.buf is not buf:
                        return
        finally:
            if pos:
                del buf[:pos]

    async def _control(self, line: bytes) -> None:
        nc: Any = self.nc
        op = line.split(b" ", 1)[0].upper()
        if op == b"PING":
            await nc._process_ping()
        elif op == b"PONG":
            await nc._process_pong()
        elif op == b"+OK":
            return
        elif op == b"-ERR":
            rest = line[4:].strip()
            await nc._process_err(rest.decode().lower() if rest else "")
        elif op == b"INFO":
            await nc._process_info(json.loads(line[5:].decode()))
        elif line:
            raise ProtocolError("nats: unknown protocol")
