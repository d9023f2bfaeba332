"""The Kubernetes REST API in front of the apiserver: kubectl, client-go and the Python client.

It runs inside the apiserver process (``python -m services.apiserver --kube-api``), reading the
apiserver's in-memory store and sending every write through the same request handlers the NATS API
uses (decode, default, validate, quota, append): one code path, no second copy of the objects.
"""
