"""The Kubernetes REST API in front of the apiserver: kubectl, client-go and the Python client.

It runs inside an apiserver process, reading its in-memory store and sending every write through
the same request handler the NATS API uses (decode, default, validate, quota, append): in the
apiserver itself (``--kube-api``) or, as the Procfile runs it, in a replica (``--kube-api-only``)
that forwards each write to the control plane's apiserver for the user who made it.
"""
