"""fpga.example.com kubelet plugin: hands the programmed FPGA to the containers through CDI.

CDI device ``fpga.example.com/fpga=<claim uid>`` with ``FPGA_DEVICE`` (which FPGA on the fabric)
and ``FPGA_BITSTREAM`` (what it was programmed with) in the container environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from events.api import classic_v1alpha1 as cv
from services.drivers.cdi import CdiDevice
from services.drivers.classic_node import ClassicNodePlugin
from services.drivers.fpga_example.controller import DRIVER_NAME

__all__ = ["FpgaNodePlugin", "fpga_devices"]


def fpga_devices(claim: cv.ResourceClaim) -> list[tuple[str, CdiDevice]]:
    attrs = claim.status.attributes
    env = (f"FPGA_DEVICE={attrs.get('fpga', '')}", f"FPGA_BITSTREAM={attrs.get('bitstream', '')}")
    return [(attrs.get("fpga", ""), CdiDevice(name=claim.metadata.uid, env=env))]


class FpgaNodePlugin(ClassicNodePlugin):
    def __init__(
        self,
        *,
        node_name: str,
        node_labels: Mapping[str, str],
        cdi_root: Path | None = None,
        state_dir: Path | None = None,
    ) -> None:
        super().__init__(
            driver_name=DRIVER_NAME,
            node_name=node_name,
            node_labels=node_labels,
            cdi_vendor="fpga.example.com",
            cdi_class="fpga",
            devices_for=fpga_devices,
            cdi_root=cdi_root,
            state_dir=state_dir,
        )
