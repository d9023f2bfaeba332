"""DRA drivers: the example drivers and CDI spec helpers (``cdi``); the kubelet plugin boundary they
implement is ``draflow.services.dra.kubeletplugin``."""
