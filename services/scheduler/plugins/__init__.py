"""Scheduler plugins, one package each, as in kube-scheduler's framework.

``default_plugins()`` is the default profile in kube-scheduler's order (the Filter order decides
which plugin a node's rejection is attributed to).

KEP-5004 (extended resources backed by DRA): ``NodeResourcesFit`` reads the mapping of extended
resource names to DeviceClasses from the cluster snapshot (``ClusterState.extended``) unless given
``dra_backed=...``, and ``DynamicResources`` builds, allocates and hands PreBind the node-specific
special claim, as upstream.

KEP-4381 numeric parameters: ``NumericResources`` allocates classic claims whose class lists
``numericParameters``; the classic plugin leaves those claims to it (``ignore``).
"""

from __future__ import annotations

from draflow.services.scheduler.plugins.classic import ClassicDynamicResources
from draflow.services.scheduler.plugins.dynamicresources import DynamicResources
from draflow.services.scheduler.plugins.nodeaffinity import NodeAffinity
from draflow.services.scheduler.plugins.nodename import NodeName
from draflow.services.scheduler.plugins.noderesources import NodeResourcesFit
from draflow.services.scheduler.plugins.nodeunschedulable import NodeUnschedulable
from draflow.services.scheduler.plugins.numeric import NumericResources
from draflow.services.scheduler.plugins.schedulinggates import SchedulingGates
from draflow.services.scheduler.plugins.tainttoleration import TaintToleration

__all__ = ["default_plugins"]


def default_plugins() -> list[object]:
    numeric = NumericResources()
    classic = ClassicDynamicResources()
    classic.ignore = numeric.owns  # KEP-4381: numeric claims are allocated by NumericResources
    return [
        SchedulingGates(),
        NodeUnschedulable(),
        NodeName(),
        TaintToleration(),
        NodeAffinity(),
        NodeResourcesFit(),
        DynamicResources(),
        classic,
        numeric,
    ]
