"""The scheduler service: allocates devices to claims (``structured/``) using CEL selectors (``cel/``)."""
