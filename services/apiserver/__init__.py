"""The API server: admission (``admission``: decode, default, validate) and the service that answers
``<root>.api.<verb>`` requests from an in-memory store rebuilt from the log (``server``, ``store``,
``apply``, ``lifecycle``), plus the client library (``client``) the CLI and controllers use.
See docs/cli.md for the protocol and for how controllers append domain events.
"""
