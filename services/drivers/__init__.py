"""DRA drivers: the kubelet plugin boundary (``api``), CDI spec helpers (``cdi``), example drivers."""
