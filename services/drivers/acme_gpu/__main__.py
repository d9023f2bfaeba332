"""``python -m draflow.services.drivers.acme_gpu``: the gpu.acme.com driver's capacity publisher.

Keeps one ``NodeGpuCapacity`` per node labelled ``gpu.acme.com/gpus=<N>`` and
``gpu.acme.com/gpu-memory=<quantity>`` (see ``publisher``). Allocation runs in the
driver-controller (``python -m draflow.services.driver_controller``), preparation in the node plugin
(``AcmeGpuNodePlugin``), run per node as a kubelet plugin process
(``python -m draflow.services.drivers.classic_plugin --driver gpu.acme.com --node N``).
"""

from __future__ import annotations

if __name__ == "__main__":
    # run as a service: a SIGTERM or Ctrl-C that arrives while the imports below load is recorded,
    # then stops the service cleanly (draflow.infra.signals)
    from draflow.infra.signals import install_early

    install_early()

import sys

from draflow.infra.service import ServiceContext, run_service
from draflow.services.drivers.acme_gpu.publisher import CapacityPublisher
from draflow.services.runtime.controller import Runtime

ACTOR = "acme-gpu-driver"


async def main(ctx: ServiceContext) -> None:
    rt = Runtime(ctx.store, actor=ACTOR)
    await rt.start()
    try:
        print(f"{ACTOR}: publishing NodeGpuCapacity on {ctx.settings.nats_url}", flush=True)
        await rt.run(ctx.stop, CapacityPublisher(rt).sync)
    finally:
        await rt.stop()


if __name__ == "__main__":
    sys.exit(run_service(ACTOR, main))
