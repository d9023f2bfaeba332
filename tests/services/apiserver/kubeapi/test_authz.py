"""Who may do what through the Kubernetes API (pure), and the token file the users live in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from draflow.services.apiserver.kubeapi.authz import (
    EDIT,
    VIEW,
    Attributes,
    ImpersonationError,
    allowed,
    forbidden_message,
    impersonate,
    verb_of,
)
from draflow.services.apiserver.kubeapi.tokens import (
    MASTERS,
    TOKENS_FILE,
    TokenError,
    TokenFile,
    User,
    add_user,
    admin_line,
    read_tokens,
    remove_user,
)

ALICE = User("alice", "u1", (VIEW, "system:authenticated"))
BOB = User("bob", "u2", (EDIT, "system:authenticated"))
ROOT = User("admin", "admin", (MASTERS, "system:authenticated"))
NOBODY = User("carol", "u3", ("system:authenticated",))

CREATE_POD = Attributes("create", "", "pods", True, "default")
LIST_PODS = Attributes("list", "", "pods", True)
CREATE_CLASS = Attributes("create", "resource.k8s.io", "deviceclasses", False)
PATCH_QUOTA = Attributes("patch", "", "resourcequotas", True, "default", "q")
STATUS = Attributes("update", "", "pods", True, "default", "p", "status")
DELETE_ALL_NS = Attributes("deletecollection", "", "pods", True)


@pytest.mark.parametrize(
    ("user", "attrs", "expected"),
    [
        (ROOT, CREATE_CLASS, True),
        (ALICE, LIST_PODS, True),
        (ALICE, Attributes("watch", "resource.k8s.io", "resourceclaims", True), True),
        (ALICE, CREATE_POD, False),
        (ALICE, STATUS, False),
        (BOB, CREATE_POD, True),
        (BOB, STATUS, False),  # status is what controllers and kubelets report
        (BOB, Attributes("patch", "apps", "deployments", True, "default", "d", "scale"), True),
        (BOB, Attributes("update", "coordination.k8s.io", "leases", True, "kube-node-lease", "n"), False),
        (BOB, LIST_PODS, True),
        (BOB, CREATE_CLASS, False),  # cluster-scoped: the admin's
        (BOB, Attributes("create", "apiextensions.k8s.io", "customresourcedefinitions", False), False),
        (BOB, Attributes("create", "gpu.example.com", "claimparameters", True, "team"), True),
        (BOB, PATCH_QUOTA, False),  # quota is the admin's, as upstream's edit role
        (BOB, DELETE_ALL_NS, False),  # every namespace at once is not "a namespace"
        (NOBODY, LIST_PODS, False),  # authenticated alone: discovery only
        (NOBODY, CREATE_POD, False),
    ],
)
def test_roles(user: User, attrs: Attributes, expected: bool) -> None:
    assert allowed(user, attrs) is expected


def test_forbidden_messages_are_upstreams() -> None:
    assert forbidden_message(ALICE, CREATE_POD) == (
        'pods is forbidden: User "alice" cannot create resource "pods" in API group "" '
        'in the namespace "default"'
    )
    assert forbidden_message(BOB, CREATE_CLASS) == (
        'deviceclasses.resource.k8s.io is forbidden: User "bob" cannot create resource "deviceclasses" '
        'in API group "resource.k8s.io" at the cluster scope'
    )
    assert forbidden_message(ALICE, STATUS) == (
        'pods "p" is forbidden: User "alice" cannot update resource "pods/status" in API group "" '
        'in the namespace "default"'
    )


def test_verbs() -> None:
    assert verb_of("GET", True, False) == "get"
    assert verb_of("GET", False, False) == "list"
    assert verb_of("GET", False, True) == "watch"
    assert verb_of("DELETE", False, False) == "deletecollection"
    assert verb_of("PATCH", True, False) == "patch"


def _directory(tmp_path: Path) -> Path:
    (tmp_path / TOKENS_FILE).write_bytes(admin_line())
    return tmp_path


def test_users_are_added_and_removed_in_the_token_file(tmp_path: Path) -> None:
    d = _directory(tmp_path)
    token, user = add_user(d, "alice", [EDIT])
    assert user.groups == (EDIT, "system:authenticated")
    entries = read_tokens(d / TOKENS_FILE)
    assert [u.name for _, u in entries] == ["admin", "alice"]
    assert dict(entries)[token] == user
    assert os.stat(d / TOKENS_FILE).st_mode & 0o777 == 0o600
    # kube-apiserver's format: token,user,uid,"groups"
    line = (d / TOKENS_FILE).read_text().splitlines()[1]
    assert line == f'{token},alice,{user.uid},"{EDIT},system:authenticated"'
    with pytest.raises(TokenError, match='user "alice" already has a token'):
        add_user(d, "alice", [])
    remove_user(d, "alice")
    assert [u.name for _, u in read_tokens(d / TOKENS_FILE)] == ["admin"]
    with pytest.raises(TokenError, match='user "alice" has no token'):
        remove_user(d, "alice")
    with pytest.raises(TokenError, match="administrator"):
        remove_user(d, "admin")


@pytest.mark.parametrize(
    ("name", "groups", "message"),
    [
        ("system:evil", [], "reserved for the system"),
        ("a,b", [], "user 'a,b': must start with a letter or digit"),
        ("alice", ['x"y'], "group 'x\"y'"),
        ("", [], "user ''"),
    ],
)
def test_bad_names_are_refused(tmp_path: Path, name: str, groups: list[str], message: str) -> None:
    d = _directory(tmp_path)
    before = (d / TOKENS_FILE).read_bytes()
    with pytest.raises(TokenError, match=message.replace("(", r"\(")):
        add_user(d, name, groups)
    assert (d / TOKENS_FILE).read_bytes() == before


def test_the_server_reads_the_file_again_when_it_changes(tmp_path: Path) -> None:
    d = _directory(tmp_path)
    tokens = TokenFile(d / TOKENS_FILE)
    assert [u.name for u in tokens.tokens().values()] == ["admin"]
    token, _ = add_user(d, "alice", [])
    user = tokens.authenticate(f"Bearer {token}")
    assert user is not None and user.name == "alice"
    assert tokens.authenticate(f"Basic {token}") is None
    remove_user(d, "alice")
    assert tokens.authenticate(f"Bearer {token}") is None
    (d / TOKENS_FILE).unlink()  # a missing file: nobody, not a crash
    assert tokens.tokens() == {}


def test_only_the_masters_impersonate() -> None:
    assert impersonate(ROOT, "alice", [VIEW]) == User("alice", "", (VIEW, "system:authenticated"))
    with pytest.raises(ImpersonationError, match='User "bob" cannot impersonate resource "users"') as exc:
        impersonate(BOB, "admin", [])
    assert exc.value.code == 403
    with pytest.raises(ImpersonationError, match="without impersonating a user") as exc:
        impersonate(ROOT, "", [MASTERS])
    assert exc.value.code == 400
