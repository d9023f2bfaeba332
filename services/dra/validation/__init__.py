"""Object validation every writer applies: the apiserver's admission, and the services that append
status changes without going through it (scheduler, driver controller, drivers).

``errs`` (field errors in the apiserver's message shape), ``names`` (DNS labels and subdomains,
qualified names), ``meta`` (ObjectMeta), ``common`` (rules of the resource.k8s.io kinds).
"""
