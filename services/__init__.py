"""draflow's services; each sub-package with a ``__main__`` is one process of the system.

Importing this package (or any other of draflow) has no side effects: a service's own ``__main__``
installs its early signal handling (``draflow.infra.signals.install_early``) when it is run.
"""
