"""What a user of the Kubernetes API may do: a fixed role per group, least privilege by default.

There are no RBAC objects to edit: a user's groups (the token file's fourth column) name what
they may do, like upstream's default ClusterRoles bound to a group:

* ``system:masters``: everything (upstream's ``cluster-admin``; the ``admin`` user);
* ``draflow:edit``: read everything, write namespaced objects (pods, claims, claim templates,
  deployments and their scale, jobs ... in any namespace), not their ``status`` (what the
  controllers and kubelets report), not ResourceQuotas or Leases and nothing cluster-scoped
  (nodes, namespaces, DeviceClasses, ResourceSlices), as upstream's ``edit`` role;
* ``draflow:view``: read (get, list, watch) everything, as upstream's ``view`` role;
* ``system:authenticated`` alone: discovery, ``/version``, the OpenAPI documents and its own
  identity (``kubectl auth whoami``, ``kubectl auth can-i``), as upstream gives every user.

``system:masters`` may also act as another user (``kubectl --as=alice --as-group=draflow:view``,
upstream's ``Impersonate-*`` headers): the request is then decided with that user's rights, to
check what someone may do; anyone else asking is refused.

A refusal is upstream's 403: ``pods is forbidden: User "alice" cannot create resource "pods" in
API group "" in the namespace "default"``. Pure logic; the server asks before every resource request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from draflow.services.apiserver.kubeapi.tokens import AUTHENTICATED, MASTERS, User

__all__ = [
    "EDIT",
    "VIEW",
    "Attributes",
    "ImpersonationError",
    "allowed",
    "forbidden_message",
    "impersonate",
    "verb_of",
]

VIEW = "draflow:view"
EDIT = "draflow:edit"
READ_VERBS = frozenset({"get", "list", "watch"})
# namespaced resources the edit role may read but not write, as upstream's edit role: quota is the
# admin's, a Lease is a node's heartbeat (writing one would fake a node's liveness)
_EDIT_READ_ONLY = frozenset({("", "resourcequotas"), ("coordination.k8s.io", "leases")})
# subresources the edit role may write: not ``status`` (what controllers and kubelets report: a
# claim's allocation, a pod's phase), only a Deployment's ``scale``
_EDIT_SUBRESOURCES = frozenset({"", "scale"})


@dataclass(frozen=True)
class Attributes:
    """One resource request as the authorizer sees it (upstream's ``authorizer.Attributes``)."""

    verb: str  # get list watch create update patch delete deletecollection
    group: str
    resource: str  # plural
    namespaced: bool  # the resource is namespaced (writes need edit's namespace rights)
    namespace: str = ""  # "" : all namespaces or cluster-scoped
    name: str = ""
    subresource: str = ""


def verb_of(method: str, has_name: bool, watch: bool) -> str:
    """The Kubernetes verb of an HTTP request on a resource path."""
    if method in ("GET", "HEAD"):
        if watch:
            return "watch"
        return "get" if has_name else "list"
    if method == "POST":
        return "create"
    if method == "PUT":
        return "update"
    if method == "PATCH":
        return "patch"
    if method == "DELETE":
        return "delete" if has_name else "deletecollection"
    return method.lower()


def allowed(user: User, a: Attributes) -> bool:
    groups = set(user.groups)
    if MASTERS in groups:
        return True
    if a.verb in READ_VERBS and groups & {VIEW, EDIT}:
        return True
    return (
        EDIT in groups
        and a.namespaced
        and bool(a.namespace)
        and (a.group, a.resource) not in _EDIT_READ_ONLY
        and a.subresource in _EDIT_SUBRESOURCES
        and a.verb in {"create", "update", "patch", "delete", "deletecollection"}
    )


def forbidden_message(user: User, a: Attributes) -> str:
    """Upstream's Forbidden message: ``<resource>[ "<name>"] is forbidden: User "u" cannot ...``."""
    qualified = f"{a.resource}.{a.group}" if a.group else a.resource
    head = f'{qualified} "{a.name}"' if a.name else qualified
    resource = f"{a.resource}/{a.subresource}" if a.subresource else a.resource
    where = f'in the namespace "{a.namespace}"' if a.namespace else "at the cluster scope"
    return (
        f'{head} is forbidden: User "{user.name}" cannot {a.verb} resource "{resource}" '
        f'in API group "{a.group}" {where}'
    )


class ImpersonationError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.details = code, reason, details


def impersonate(user: User, name: str, groups: list[str], uid: str = "") -> User:
    """The user a request acts as (``Impersonate-User``/``-Group``/``-Uid``): only the masters
    may; the groups are the ones asked for (plus ``system:authenticated``), as upstream."""
    if not name:
        raise ImpersonationError(400, "BadRequest", f"requested groups {groups} without impersonating a user")
    if MASTERS not in user.groups:
        raise ImpersonationError(
            403,
            "Forbidden",
            f'users "{name}" is forbidden: User "{user.name}" cannot impersonate resource "users" '
            f'in API group "" at the cluster scope',
            {"name": name, "kind": "users"},
        )
    return User(name, uid, tuple(dict.fromkeys([*groups, AUTHENTICATED])))
