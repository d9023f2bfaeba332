"""ResourceQuota for DRA: what claims and pods count against a quota, and which quotas cover them.

Shared by the apiserver's quota admission and the quota reconciler, so admission and the reported
``status.used`` agree.
"""
