"""Classic DRA (KEP-3063) rules shared by the scheduler, the driver controller, the kubelet and drivers.

``plugin`` (the control-plane driver Protocol third parties implement, and its entry-point
loader), ``claims`` (claim status transitions, one function per fact), ``podclaims`` (which
classic claims a pod uses; the classic claim controller's decider), ``nodeselect``
(``availableOnNodes`` matching), ``validation`` (defaulting and validation of the classic kinds).
See docs/classic.md.
"""
