"""draflow's rendering of KEP-4381's capacity call (kubelet <-> plugin), one package per version."""
