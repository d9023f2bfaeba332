"""Retry policies (tenacity): bounded, exponential, jittered, and only for transient errors."""

from __future__ import annotations

from tenacity import (
    AsyncRetrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    stop_any,
    wait_exponential_jitter,
)

from draflow.infra.errors import TransientError

__all__ = ["transient_retry"]


def transient_retry(
    *,
    attempts: int = 8,
    max_delay_s: float = 60.0,
    initial_s: float = 0.05,
    max_wait_s: float = 2.0,
    retry_on: tuple[type[BaseException], ...] = (TransientError,),
) -> AsyncRetrying:
    """Retry ``retry_on`` errors at most ``attempts`` times within ``max_delay_s``; re-raise the last."""
    return AsyncRetrying(
        stop=stop_any(stop_after_attempt(attempts), stop_after_delay(max_delay_s)),
        wait=wait_exponential_jitter(multiplier=initial_s, max=max_wait_s, jitter=initial_s),
        retry=retry_if_exception_type(retry_on),
        reraise=True,
    )
