"""The scheduler service shell around the pure core (``draflow.services.scheduler.framework``)."""

from draflow.services.scheduler.service.runner import SchedulerService
from draflow.services.scheduler.service.snapshot import Snapshot

__all__ = ["SchedulerService", "Snapshot"]
