"""When "the stream ends before my position" is a reset: pure rules, the clock handed in."""

from __future__ import annotations

import msgspec
import pytest

from draflow.infra.errors import StoreUnavailable
from draflow.infra.reader import StreamStatus
from draflow.infra.shortfall import Shortfall


def status(last_seq: int, leader: str | None = "draflow-2") -> StreamStatus:
    cluster = {} if leader is None else {"cluster": {"leader": leader}}
    info = {"created": "2026-11-29T00:00:00Z", "state": {"first_seq": 1, "last_seq": last_seq}, **cluster}
    return msgspec.json.decode(msgspec.json.encode(info), type=StreamStatus)


def test_a_stream_at_or_past_the_position_is_no_shortfall() -> None:
    gate = Shortfall("DRAFLOW")
    assert gate.judge(status(10), 10, now=0.0) is False
    assert gate.judge(status(11, leader=None), 10, now=0.0) is False  # a single server: no cluster


def test_a_leaderless_replicas_answer_never_counts() -> None:
    gate = Shortfall("DRAFLOW", confirm_s=5)
    for now in (0.0, 10.0, 100.0):
        with pytest.raises(StoreUnavailable, match="no leader"):
            gate.judge(status(9, leader=""), 10, now)


def test_a_shortfall_is_a_reset_once_it_lasted_confirm_s() -> None:
    gate = Shortfall("DRAFLOW", confirm_s=5)
    with pytest.raises(StoreUnavailable, match="ends at sequence 9, before position 10"):
        gate.judge(status(9), 10, now=100.0)
    with pytest.raises(StoreUnavailable):
        gate.judge(status(9), 10, now=104.9)
    assert gate.judge(status(9), 10, now=105.0) is True


def test_an_answer_that_caught_up_starts_the_wait_again() -> None:
    """The lagging copy of a moment: the next answer has the position, and a later shortfall is
    judged from its own start."""
    gate = Shortfall("DRAFLOW", confirm_s=5)
    with pytest.raises(StoreUnavailable):
        gate.judge(status(9), 10, now=0.0)
    assert gate.judge(status(10), 10, now=1.0) is False
    with pytest.raises(StoreUnavailable):
        gate.judge(status(9), 10, now=6.0)
    assert gate.judge(status(9), 10, now=11.0) is True
