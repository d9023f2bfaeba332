"""The example driver's opaque configuration (``GpuConfig``) and the container edits it yields.

Same API as dra-example-driver's ``gpu.resource.example.com/v1alpha1`` ``GpuConfig``: a sharing
strategy (``TimeSlicing`` with an interval, or ``SpacePartitioning`` with a partition count),
defaulted to time slicing with the ``Default`` interval. Configs come from the claim's allocation
(class configs first, then claim configs; a later one wins for a request), and only those addressed
to this driver count. The "configuration" is simulated, as upstream: it only becomes environment
variables in the container (``GPU_DEVICE_<n>=gpu-<n>``, ``GPU_DEVICE_<n>_SHARING_STRATEGY=...``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from draflow.events.api.resource_v1 import DeviceAllocationConfiguration, DeviceRequestAllocationResult

__all__ = [
    "CONFIG_API_VERSION",
    "ConfigError",
    "GpuConfig",
    "config_for_result",
    "device_env",
    "parse_gpu_config",
    "relevant_configs",
]

CONFIG_API_VERSION = "gpu.resource.example.com/v1alpha1"
INTERVALS = ("Default", "Short", "Medium", "Long")


class ConfigError(ValueError):
    """A config addressed to this driver that it cannot use; fails the claim's preparation."""


@dataclass(frozen=True, slots=True)
class GpuConfig:
    strategy: str = "TimeSlicing"
    interval: str = "Default"
    partition_count: int = 1


def parse_gpu_config(params: Any) -> GpuConfig:
    """Decode, default and validate opaque parameters (upstream Normalize + Validate)."""
    if not isinstance(params, dict):
        raise ConfigError("error decoding config parameters: expected a JSON object")
    api_version, kind = params.get("apiVersion"), params.get("kind")
    if api_version != CONFIG_API_VERSION or kind != "GpuConfig":
        raise ConfigError(
            f'error decoding config parameters: no kind "{kind}" is registered for version "{api_version}"'
        )
    sharing = params.get("sharing")
    if sharing is None:
        return GpuConfig()
    if not isinstance(sharing, dict):
        raise ConfigError("error decoding config parameters: sharing: expected an object")
    strategy = sharing.get("strategy")
    if strategy == "TimeSlicing":
        interval = (sharing.get("timeSlicingConfig") or {}).get("interval") or "Default"
        if interval not in INTERVALS:
            raise ConfigError(f"error validating GPU config: unknown time-slice interval: {interval}")
        if sharing.get("spacePartitioningConfig") is not None:
            raise ConfigError("cannot use SpacePartitioningConfig with the 'TimeSlicing' strategy")
        return GpuConfig(strategy="TimeSlicing", interval=interval)
    if strategy == "SpacePartitioning":
        count = (sharing.get("spacePartitioningConfig") or {}).get("partitionCount", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ConfigError(f"error validating GPU config: invalid partition count: {count}")
        if sharing.get("timeSlicingConfig") is not None:
            raise ConfigError("cannot use TimeSlicingConfig with the 'SpacePartitioning' strategy")
        return GpuConfig(strategy="SpacePartitioning", partition_count=count or 1)
    raise ConfigError(f"error validating GPU config: unknown GPU sharing strategy: {strategy}")


@dataclass(frozen=True, slots=True)
class _Relevant:
    requests: tuple[str, ...]
    config: GpuConfig


def relevant_configs(driver: str, configs: Sequence[DeviceAllocationConfiguration]) -> list[_Relevant]:
    """This driver's configs, lowest precedence first (class before claim, list order within)."""
    by_source: dict[str, list[DeviceAllocationConfiguration]] = {"FromClass": [], "FromClaim": []}
    for config in configs:
        if config.source not in by_source:
            raise ConfigError(f"invalid config source: {config.source}")
        by_source[config.source].append(config)
    out: list[_Relevant] = []
    for config in (*by_source["FromClass"], *by_source["FromClaim"]):
        if config.opaque is None:
            raise ConfigError("only opaque parameters are supported by this driver")
        if config.opaque.driver != driver:
            continue
        out.append(_Relevant(requests=config.requests, config=parse_gpu_config(config.opaque.parameters)))
    return out


def config_for_result(relevant: Sequence[_Relevant], result: DeviceRequestAllocationResult) -> GpuConfig:
    """The highest-precedence config that applies to a result's request (default when none)."""
    base = result.request.split("/", 1)[0]
    for item in reversed(relevant):
        if not item.requests or result.request in item.requests or base in item.requests:
            return item.config
    return GpuConfig()


def _env_id(device: str) -> str:
    """``gpu-0`` -> ``0``, ``gpu-0-partition-1`` -> ``0_PARTITION_1`` (upstream envVarSafeID)."""
    tail = device[4:] if device.startswith("gpu-") else device
    return tail.replace("-", "_").upper()


def device_env(result: DeviceRequestAllocationResult, config: GpuConfig) -> list[str]:
    """The environment a config gives one allocated device."""
    env_id = _env_id(result.device)
    env = [
        f"GPU_DEVICE_{env_id}={result.device}",
        f"GPU_DEVICE_{env_id}_SHARING_STRATEGY={config.strategy}",
    ]
    if config.strategy == "TimeSlicing":
        env.append(f"GPU_DEVICE_{env_id}_TIMESLICE_INTERVAL={config.interval}")
    else:
        env.append(f"GPU_DEVICE_{env_id}_PARTITION_COUNT={config.partition_count}")
    for name in ("memory", "compute"):
        if name in result.consumed_capacity:
            env.append(f"GPU_DEVICE_{env_id}_{name.upper()}={result.consumed_capacity[name]}")
    return env
