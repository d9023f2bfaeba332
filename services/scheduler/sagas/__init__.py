"""The scheduler's sagas (run by the scheduler service on the engine in ``sagas.engine``)."""
