"""``python -m draflow.services.apiserver``: run the API server until SIGTERM / SIGINT.

Configuration comes from the environment (``draflow.infra.config.Settings``: ``DRAFLOW_NATS_URL``,
``DRAFLOW_STREAM``, ``DRAFLOW_SUBJECT_ROOT``...); spans go to the system's ``otlp`` receiver unless
``OTEL_EXPORTER_OTLP_ENDPOINT`` says otherwise (``infra/tracing.py``).
It runs under the shared service runner, so a SIGTERM while it still waits for nats-server (honcho
starts everything at once) stops it cleanly, like every other service.

``--kube-api [HOST:PORT]`` also serves the Kubernetes REST API over HTTPS for kubectl
(``draflow.services.apiserver.kubeapi``; default ``DRAFLOW_KUBE_API``, else 127.0.0.1:8443 plus
``DRAFLOW_PORT_OFFSET``), writing ``$DRAFLOW_DATA_DIR/kubeconfig``. With ``--kube-api-only`` the
process is a replica serving only that (no NATS API requests, no namespace controller), connecting
as the ``kube-api`` role: kubectl's LISTs and watchers then run on their own process, not on the
control plane's apiserver, and its writes are forwarded to that apiserver for the user who made
them. The Procfile runs it so, at a lower CPU priority (``nice``).

Flags (kube-apiserver's): ``--default-not-ready-toleration-seconds`` and
``--default-unreachable-toleration-seconds`` (300), the ``tolerationSeconds`` the
DefaultTolerationSeconds admission plugin gives every pod for the not-ready / unreachable
NoExecute taints.
"""

from __future__ import annotations

if __name__ == "__main__":
    # run as a service: a SIGTERM or Ctrl-C that arrives while the imports below load is recorded,
    # then stops the service cleanly (draflow.infra.signals)
    from draflow.infra.signals import install_early

    install_early()

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from draflow.infra.config import add_nats_url_arg
from draflow.infra.metrics import add_metrics_arg
from draflow.infra.service import ServiceContext, Unusable, run_service
from draflow.services.apiserver.admission.tolerations import (
    DEFAULT_TOLERATION_SECONDS,
    DefaultTolerationSeconds,
)
from draflow.services.apiserver.server import ApiServer


def parse_args(argv: list[str] | None = None) -> tuple[DefaultTolerationSeconds, str | None, bool]:
    p = argparse.ArgumentParser(prog="python -m draflow.services.apiserver", description=__doc__)
    for which in ("not-ready", "unreachable"):
        p.add_argument(
            f"--default-{which}-toleration-seconds",
            type=int,
            default=DEFAULT_TOLERATION_SECONDS,
            metavar="N",
            help=f"tolerationSeconds of the {which}:NoExecute toleration added to every pod that has none",
        )
    p.add_argument(
        "--kube-api",
        nargs="?",
        const="",
        default=None,
        metavar="HOST:PORT",
        help="also serve the Kubernetes API (kubectl) over HTTPS; default $DRAFLOW_KUBE_API, else "
        "127.0.0.1:8443 plus $DRAFLOW_PORT_OFFSET; 'off' turns it off",
    )
    p.add_argument(
        "--kube-api-only",
        action="store_true",
        help="serve only the Kubernetes API (a replica: no NATS API requests, no namespace controller)",
    )
    add_metrics_arg(p)  # read by draflow.infra.service.run_service
    add_nats_url_arg(p)  # read by draflow.infra.service.run_service
    args = p.parse_args(argv)
    tolerations = DefaultTolerationSeconds(
        args.default_not_ready_toleration_seconds, args.default_unreachable_toleration_seconds
    )
    if args.kube_api_only and args.kube_api is None:
        args.kube_api = ""  # the default address
    return tolerations, args.kube_api, args.kube_api_only


def make_serve(
    tolerations: DefaultTolerationSeconds, kube_api: tuple[str, int] | None = None, *, only: bool = False
) -> Callable[[ServiceContext], Coroutine[Any, Any, None]]:
    async def serve(ctx: ServiceContext) -> None:
        server = ApiServer(ctx.store, tolerations=tolerations, requests=not only)
        kube = None
        try:
            await server.start()
            if kube_api is not None:
                from draflow.services.apiserver.kubeapi.run import kubeconfig_path, start_kube_api

                try:
                    kube = await start_kube_api(server, ctx.settings, kube_api)
                except OSError as exc:  # the port is taken: serve NATS anyway, as with metrics
                    host, port = kube_api
                    why = (
                        f"cannot serve the Kubernetes API on {host}:{port}: {exc.strerror or exc} "
                        "(another system on this machine? give each system its own DRAFLOW_PORT_OFFSET)"
                    )
                    if only:  # a replica with nothing else to serve
                        raise Unusable(why) from None
                    print(f"apiserver: {why}", file=sys.stderr, flush=True)
                else:
                    print(
                        f"apiserver: Kubernetes API on {kube.url} "
                        f"(kubeconfig: {kubeconfig_path(ctx.settings)})",
                        flush=True,
                    )
            if only:
                await ctx.stop.wait()
                return
            # Tests and the demo wait for this line: the API answers from here on.
            print(f"apiserver: serving {ctx.settings.root}.api.* on {ctx.settings.nats_url}", flush=True)
            await ctx.stop.wait()
        finally:
            if kube is not None:
                await kube.stop()
            await server.stop()

    return serve


def main() -> None:
    tolerations, kube_flag, only = parse_args()
    try:
        from draflow.services.apiserver.kubeapi.run import kube_api_address

        kube_api = kube_api_address(kube_flag)
    except ValueError as exc:
        print(f"apiserver: {exc}", file=sys.stderr)
        sys.exit(2)
    if only and kube_api is None:
        print("apiserver: --kube-api-only with the Kubernetes API off: nothing to serve", file=sys.stderr)
        sys.exit(2)
    serve = make_serve(tolerations, kube_api, only=only)
    if only:  # a credential of its own: it forwards writes for users, it appends nothing itself
        sys.exit(run_service("apiserver", serve, actor="kube-api", role="kube-api"))
    sys.exit(run_service("apiserver", serve))


if __name__ == "__main__":
    main()
