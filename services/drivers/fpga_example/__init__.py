"""``fpga.example.com``: a classic (KEP-3063) driver for network-attached FPGAs.

A pool of FPGAs sits on a fabric reachable from every node carrying the label
``fpga.example.com/fabric`` (value configurable). Claims ask for a bitstream (and optionally
memory); allocation programs an FPGA, which takes ``programming_steps`` calls (a deterministic
stand-in for the programming delay), and the result is available on the reachable nodes.
"""

from draflow.services.drivers.fpga_example.controller import DRIVER_NAME, Fpga, FpgaController, create_plugin
from draflow.services.drivers.fpga_example.node import FpgaNodePlugin
from draflow.services.drivers.fpga_example.params import FpgaParameters, parse_parameters

__all__ = [
    "DRIVER_NAME",
    "Fpga",
    "FpgaController",
    "FpgaNodePlugin",
    "FpgaParameters",
    "create_plugin",
    "parse_parameters",
]
