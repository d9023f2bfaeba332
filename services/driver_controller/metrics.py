"""KEP-3063's driver-controller metrics ("Monitoring Requirements"), on the shared registry.

* ``resource_controller_create_total``: ResourceClaims the classic claim controller tried to
  create from a Pod's inline template (``<pod>-<name>``);
* ``resource_controller_create_failures_total``: those attempts that failed (refused by
  admission or the append failed for another reason than "already created");
* ``workqueue_depth{name="resource_claim"}`` (defined in :mod:`draflow.infra.metrics`): claims with work
  left after a pass of the driver-controller (an action to take or a saga running).

``draflow.infra.service`` serves them on ``/metrics`` at the service's metrics port (``infra/metrics.py``).
"""

from __future__ import annotations

from prometheus_client import Counter

from draflow.infra.metrics import WORKQUEUE_DEPTH

__all__ = ["CLAIM_QUEUE", "CREATE_FAILURES", "CREATE_TOTAL"]

CREATE_TOTAL = Counter(
    "resource_controller_create",
    "ResourceClaims the classic claim controller tried to create from Pod claim templates.",
)
CREATE_FAILURES = Counter(
    "resource_controller_create_failures",
    "ResourceClaim creations from Pod claim templates that failed.",
)
CLAIM_QUEUE = WORKQUEUE_DEPTH.labels(name="resource_claim")
