"""The ``otlp`` service: an OTLP trace receiver (HTTP and gRPC), a span store and a Jaeger-shaped
query API.

No Jaeger can be installed on the development machines, so this stands in for one: services export
spans to it exactly as they would to Jaeger's OTLP ports (by default, or wherever
``OTEL_EXPORTER_OTLP_ENDPOINT`` says), and ``draflow trace`` reads them back through the query API
(which has the shape of Jaeger's, so the CLI works against a real Jaeger query service too).
"""
