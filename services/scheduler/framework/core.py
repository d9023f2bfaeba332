"""``Scheduler``: cluster state + queue + profile wired together, the API the service drives.

    core = Scheduler(SchedulerConfig(), plugins=default_plugins(), clock=time.monotonic)
    core.observe(obj)                         # every object change consumed from the log
    core.observe_deleted("Pod", ns, name)     # every deletion
    while (step := core.schedule_next()) is not None:
        qpi, result = step                    # Reserved -> start the PodScheduling saga
                                              # Unschedulable -> condition + Warning event
                                              #   (+ reallocation saga if result.deallocate)
                                              # SchedulingError -> condition + Warning event
    core.unreserve(pod)                       # saga compensation: forget, back to backoff

No I/O and no wall clock in decisions: ``clock`` only times backoff and the unschedulable flush.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from draflow.events.api.core_v1 import Pod
from draflow.services.dra.resourceclaim import is_pod_terminal
from draflow.services.scheduler.framework.assume import pod_key
from draflow.services.scheduler.framework.cluster import ClusterState, is_assigned
from draflow.services.scheduler.framework.config import SchedulerConfig
from draflow.services.scheduler.framework.cycle import schedule_one
from draflow.services.scheduler.framework.decisions import Reserved, ScheduleResult, Unschedulable
from draflow.services.scheduler.framework.profile import Profile
from draflow.services.scheduler.framework.queue import QueuedPodInfo, SchedulingQueue

__all__ = ["Scheduler"]


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig | None = None,
        *,
        plugins: Sequence[object],
        clock: Callable[[], float] | None = None,
    ) -> None:
        """``plugins``: the profile, in kube-scheduler's order (the service hands it
        ``draflow.services.scheduler.plugins.default_plugins()``; the framework imports no plugin)."""
        self.config = config if config is not None else SchedulerConfig()
        self.cluster = ClusterState(self.config.features)
        for plugin in plugins:
            hook = getattr(plugin, "forget_pod", None)
            if hook is not None:
                self.cluster.forget_hooks.append(hook)
        self.profile = Profile(plugins)
        self.queue = SchedulingQueue(self.profile, self.cluster, self.config, clock)

    def _ours(self, pod: Pod) -> bool:
        return pod.spec.scheduler_name in ("", self.config.scheduler_name)

    def observe(self, obj: object) -> None:
        """Apply a created or changed object and requeue the pods it may help."""
        if isinstance(obj, Pod) and not is_assigned(obj):
            meta = obj.metadata
            done = (
                bool(obj.spec.node_name)
                or meta.deletion_timestamp
                or is_pod_terminal(obj)
                or not self._ours(obj)
            )
            if done:
                self.queue.delete(meta.namespace, meta.name)
            elif pod_key(obj) not in self.cluster.assumed.pods:
                # An assumed pod belongs to its PodScheduling saga until bound or unreserved.
                self.queue.add(obj)
            self.queue.on_event(self.cluster.upsert_pod(obj))
            return
        if isinstance(obj, Pod):
            self.queue.delete(obj.metadata.namespace, obj.metadata.name)
        self.queue.on_event(self.cluster.upsert(obj))

    def observe_deleted(self, kind: str, namespace: str, name: str) -> None:
        if kind == "Pod":
            self.queue.delete(namespace, name)
            for event in self.cluster.forget(f"{namespace}/{name}"):
                self.queue.on_event(event)
        self.queue.on_event(self.cluster.delete(kind, namespace, name))

    def schedule(self, pod: Pod) -> ScheduleResult:
        """One cycle for ``pod`` without the queue (tests, ``draflow simulate``)."""
        return schedule_one(pod, self.cluster, self.profile, self.config)

    def schedule_next(self) -> tuple[QueuedPodInfo, ScheduleResult] | None:
        """Pop the next active pod and run its cycle; None when no pod is ready."""
        while True:
            qpi = self.queue.pop()
            if qpi is None:
                return None
            if qpi.key not in self.cluster.assumed.pods:
                break
            # Assumed by a saga (e.g. one resumed after a restart) while queued: the saga owns it.
            self.queue.done(qpi.key)
        result = schedule_one(qpi.pod, self.cluster, self.profile, self.config)
        if isinstance(result, Reserved):
            self.queue.done(qpi.key)
        elif isinstance(result, Unschedulable):
            self.queue.add_unschedulable(qpi, result.unschedulable_plugins)
        else:
            self.queue.add_backoff(qpi)
        return qpi, result

    def unreserve(self, pod: Pod) -> None:
        """PodScheduling saga compensation: drop the assumed decision and retry after backoff."""
        for event in self.cluster.forget(pod_key(pod)):
            self.queue.on_event(event)
        if not is_assigned(pod) and self._ours(pod):
            self.queue.requeue(pod)
