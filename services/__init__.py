"""draflow's services; each sub-package with a ``__main__`` is one process of the system."""

import sys

# `python -m services.<name>` (the CLI aside): this process is a service, so a SIGTERM during its
# start-up must stop it cleanly rather than kill it (see infra.signals).
if sys.argv[:1] == ["-m"] and "services.cli" not in sys.orig_argv:
    from infra.signals import install_early

    install_early()
