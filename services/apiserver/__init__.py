"""The API server: admission (``admission``: decode, default, validate) and the service that answers
``<root>.api.<verb>`` requests from the log-fed object cache (``server``, ``apply``, ``lifecycle``;
the cache, the wire protocol and the client library are ``services.runtime``'s). See docs/cli.md
for the protocol and for how controllers append domain events.
"""
