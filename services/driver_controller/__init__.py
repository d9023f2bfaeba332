"""Classic DRA (KEP-3063) control plane: the driver controller (``python -m services.driver_controller``).

``controller`` (its decider: ``sync_claim``, ``unsuitable_updates``; pure), ``sagas`` (the
allocation, reallocation and teardown sagas and the pure meaning of every step), ``saga_wiring``
and ``store`` (those sagas on the engine, over the event store), ``service`` (the passes),
``metrics``. The classic rules it shares with the scheduler, the kubelet and the drivers (claim
transitions, the pods' claims, the driver plugin Protocol, validation) are
``services.dra.classic``'s; the classic kubelet host is ``services.kubelet.classic_host``, the
node plugin base ``services.drivers.classic_node``. See docs/classic.md.
"""
