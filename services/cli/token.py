"""``draflow token create|list|revoke``: the users of the Kubernetes API, each with a kubeconfig.

A user is a line of the apiserver's token file (``$DRAFLOW_DATA_DIR/kubeapi/tokens.csv``,
kube-apiserver's ``--token-auth-file`` format); their groups decide what they may do
(``services/apiserver/kubeapi/authz.py``): by default ``draflow:view``, read-only. ``create``
writes ``$DRAFLOW_DATA_DIR/kubeconfigs/<user>.yaml`` (the server and CA of the admin's kubeconfig,
the user's token) to hand to the user; ``revoke`` removes the token, which stops working at the
next request (the running apiserver reads the file again when it changes). No NATS connection:
these are files of the data dir, managed on the machine that holds it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from draflow.infra.config import Settings
from draflow.services.cli.main import UserError

__all__ = ["register"]

DEFAULT_GROUP = "draflow:view"


def register(sub: Any) -> None:
    p = sub.add_parser("token", help="users of the Kubernetes API: bearer tokens and their kubeconfigs")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", help="the system's data dir (default $DRAFLOW_DATA_DIR, else ./var)")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = actions.add_parser("create", help="a token and a kubeconfig for a new user", parents=[common])
    c.add_argument("user")
    c.add_argument(
        "--group",
        action="append",
        default=[],
        help=f"a group of the user, repeatable: {DEFAULT_GROUP} (read, the default), draflow:edit "
        "(write namespaced objects), system:masters (everything)",
    )
    c.add_argument(
        "--kubeconfig", help="where to write the user's kubeconfig (default DATA/kubeconfigs/USER.yaml)"
    )
    c.set_defaults(func=run_create)
    ls = actions.add_parser("list", help="every user with their groups (not their tokens)", parents=[common])
    ls.set_defaults(func=run_list)
    r = actions.add_parser(
        "revoke", help="remove a user's token (and the kubeconfig create wrote)", parents=[common]
    )
    r.add_argument("user")
    r.set_defaults(func=run_revoke)


def _data_dir(args: argparse.Namespace) -> Path:
    return Path(args.data_dir) if args.data_dir else Settings.from_env().data_dir


def _kubeconfig_path(data_dir: Path, user: str) -> Path:
    return data_dir / "kubeconfigs" / f"{user}.yaml"


def run_create(args: argparse.Namespace) -> int:
    from draflow.services.apiserver.kubeapi.auth import kubeconfig
    from draflow.services.apiserver.kubeapi.tokens import TokenError, add_user, write_private

    data_dir = _data_dir(args)
    admin = data_dir / "kubeconfig"
    try:
        server = yaml.safe_load(admin.read_text())["clusters"][0]["cluster"]["server"]
        ca_pem = (data_dir / "kubeapi" / "ca.crt").read_bytes()
    except (OSError, KeyError, IndexError, TypeError, yaml.YAMLError):
        raise UserError(
            f"{admin}: no Kubernetes API has started with this data dir yet "
            "(the apiserver with --kube-api writes it on first start)"
        ) from None
    try:
        token, user = add_user(data_dir / "kubeapi", args.user, args.group or [DEFAULT_GROUP])
    except TokenError as exc:
        raise UserError(str(exc)) from None
    path = Path(args.kubeconfig) if args.kubeconfig else _kubeconfig_path(data_dir, user.name)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    text = yaml.safe_dump(kubeconfig(ca_pem, server, user.name, token), sort_keys=False)
    write_private(path, text.encode())
    print(f'user "{user.name}" created (groups {",".join(user.groups)})')
    print(f"kubeconfig: {path}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from draflow.services.apiserver.kubeapi.tokens import TOKENS_FILE, read_tokens

    path = _data_dir(args) / "kubeapi" / TOKENS_FILE
    if not path.exists():
        raise UserError(f"{path} does not exist: start the apiserver with --kube-api once to create it")
    rows = [(u.name, u.uid, ",".join(u.groups)) for _, u in read_tokens(path)]
    width = max([4, *(len(r[0]) for r in rows)])
    uid_width = max([3, *(len(r[1]) for r in rows)])
    print(f"{'USER':<{width}}   {'UID':<{uid_width}}   GROUPS")
    for name, uid, groups in rows:
        print(f"{name:<{width}}   {uid:<{uid_width}}   {groups}")
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    from draflow.services.apiserver.kubeapi.tokens import TokenError, remove_user

    data_dir = _data_dir(args)
    try:
        remove_user(data_dir / "kubeapi", args.user)
    except TokenError as exc:
        raise UserError(str(exc)) from None
    _kubeconfig_path(data_dir, args.user).unlink(missing_ok=True)
    print(f'user "{args.user}" revoked')
    return 0
