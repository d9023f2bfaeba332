"""The scheduler service shell around the pure core (``services.scheduler.framework``)."""

from services.scheduler.service.runner import SchedulerService
from services.scheduler.service.snapshot import Snapshot

__all__ = ["SchedulerService", "Snapshot"]
