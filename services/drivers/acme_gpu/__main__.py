"""``python -m services.drivers.acme_gpu``: the gpu.acme.com driver's capacity publisher.

Keeps one ``NodeGpuCapacity`` per node labelled ``gpu.acme.com/gpus=<N>`` and
``gpu.acme.com/gpu-memory=<quantity>`` (see ``publisher``). Allocation runs in the
driver-controller (``python -m services.driver_controller``), preparation in the node plugin
(``AcmeGpuNodePlugin``) hosted by the kubelet.
"""

from __future__ import annotations

import sys

from infra.service import ServiceContext, run_service
from services.drivers.acme_gpu.publisher import CapacityPublisher
from services.runtime.controller import Runtime

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
