"""``python -m services.drivers.gpu_example``: the gpu.example.com driver's slice publisher.

Applies the driver's DeviceClass once, then publishes ResourceSlices for every Node labelled
``gpu.example.com/gpus=<N>`` (see ``publisher``). The node side (prepare/unprepare, CDI specs) runs
in each kubelet (``python -m services.kubelet --node NAME --gpus N``).
"""

from __future__ import annotations

import sys

import yaml

from events.api.codec import decode_object
from infra.service import ServiceContext, run_service
from services.drivers.gpu_example import DEVICE_CLASS_MANIFEST
from services.drivers.gpu_example.publisher import SlicePublisher
from services.runtime.controller import Runtime

ACTOR = "gpu-example-driver"


async def main(ctx: ServiceContext) -> None:
    rt = Runtime(ctx.store, actor=ACTOR)
    await rt.start()
    await rt.wait_for_apiserver()
    try:
        manifest = yaml.safe_load(DEVICE_CLASS_MANIFEST.read_text())
        if rt.get("DeviceClass", "", manifest["metadata"]["name"]) is None:
            await rt.create(decode_object(manifest))
        print(f"{ACTOR}: publishing ResourceSlices on {ctx.settings.nats_url}", flush=True)
        await rt.run(ctx.stop, SlicePublisher(rt).sync)
    finally:
        await rt.stop()


if __name__ == "__main__":
    sys.exit(run_service(ACTOR, main))
