"""draflow: Kubernetes Dynamic Resource Allocation as an event-sourced workflow engine on NATS JetStream.

The one import root. Its sub-packages are the repository's top-level folders (``draflow/events`` is
``events/``, and so on for ``infra``, ``projections``, ``sagas`` and ``services``): import them as
``draflow.events.…``, never by their bare folder names (``tests/test_layers.py`` refuses that).
Importing any package of draflow has no side effects: a service installs its signal handling in
its own ``__main__`` (``python -m draflow.services.<name>``).
"""
