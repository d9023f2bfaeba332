"""frobnicator.example.com: KEP-4381's example driver, a numeric-parameters driver.

It has no controller: the scheduler allocates its claims from the capacity its node plugin
reports (the ``counter.dra.config.k8s.io`` model: one instance per node holding N frobnicators),
mapping the driver's ``ClaimParameters`` CRD (``numberOfFrobnicators`` 1-16, ``env``) onto the
model with the class's CEL template. Its node plugin (:mod:`.node`, run as its own process by
``draflow.services.drivers.classic_plugin --driver frobnicator.example.com``) streams the capacity
to the kubelet and prepares allocated claims after checking the frobnicators are still there.
"""

from __future__ import annotations

__all__ = ["CAPACITY_LABEL", "DRIVER_NAME", "INSTANCE"]

DRIVER_NAME = "frobnicator.example.com"
# the demo's "hardware": how many frobnicators a node has, from this node label
CAPACITY_LABEL = "frobnicator.example.com/frobnicators"
INSTANCE = "frobnicators"
