"""Generated from ``api.proto`` by ``draflow.services.runtime.kubeletapi.gen``."""
