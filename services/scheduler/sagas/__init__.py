"""The scheduler's sagas (run by the scheduler service on the engine in ``draflow.sagas.engine``)."""
