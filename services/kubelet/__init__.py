"""The kubelet (one per node): admission of bound pods, DRA prepare/unprepare, CDI ids, checkpoint.

Pure parts here; the service shell (``service``, ``python -m services.kubelet --node NAME``)
runs them over the log-fed cache and appends the results.
"""

from services.kubelet.admission import (
    FAILED_PREPARE,
    Admit,
    Reject,
    admit,
    release_reservations,
)
from services.kubelet.checkpoint import (
    CheckpointError,
    CorruptCheckpointError,
    decode_checkpoint,
    encode_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from services.kubelet.manager import DRAManager, ManagerError, Plan
from services.kubelet.node import failed_status, node_object, running_status
from services.kubelet.prepare import Outcome, prepare_pod, unprepare_pod
from services.kubelet.state import ClaimInfo, DeviceState
from services.kubelet.sync import Step, next_step, vanished_pods

__all__ = [
    "FAILED_PREPARE",
    "Admit",
    "CheckpointError",
    "ClaimInfo",
    "CorruptCheckpointError",
    "DRAManager",
    "DeviceState",
    "ManagerError",
    "Outcome",
    "Plan",
    "Reject",
    "Step",
    "admit",
    "decode_checkpoint",
    "encode_checkpoint",
    "failed_status",
    "next_step",
    "node_object",
    "prepare_pod",
    "read_checkpoint",
    "release_reservations",
    "running_status",
    "unprepare_pod",
    "vanished_pods",
    "write_checkpoint",
]
