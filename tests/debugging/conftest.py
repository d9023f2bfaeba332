"""The in-process scheduler cluster of ``tests/scheduler_service`` (apiserver client, real JetStream)."""

from tests.scheduler_service.conftest import cluster

__all__ = ["cluster"]
