"""Credentials and least-privilege NATS permissions (see ``roles`` for the matrix, ``authority``
for the local credential files, ``client`` for how a process connects with its own)."""
