"""Classic DRA (KEP-3063) control plane: the driver-controller's deciders, sagas and plugin interface.

Pure modules (no NATS, no SQLite): ``plugin`` (ControllerPlugin Protocol, entry-point loader),
``claims`` (claim transitions), ``controller`` (``sync_claim``, ``unsuitable_updates``),
``sagas`` (plans as data, ``run_action``), ``scheduling`` (the scheduler's classic plugin
decisions), ``podclaims`` (classic claim controller), ``kubelet`` (node-side checks),
``nodeplugin`` (kubelet plugin base), ``nodeselect``. Shell pieces: ``saga_wiring`` and ``store``
(the foundation's saga engine and event store). See docs/classic.md.
"""
