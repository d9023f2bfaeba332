"""``python -m services.apiserver``: run the API server until SIGTERM / SIGINT.

Configuration comes from the environment (``infra.config.Settings``: ``DRAFLOW_NATS_URL``,
``DRAFLOW_STREAM``, ``DRAFLOW_SUBJECT_ROOT``...); spans go to the system's ``otlp`` receiver unless
``OTEL_EXPORTER_OTLP_ENDPOINT`` says otherwise (``infra/tracing.py``).
It runs under the shared service runner, so a SIGTERM while it still waits for nats-server (honcho
starts everything at once) stops it cleanly, like every other service.

``--kube-api [HOST:PORT]`` also serves the Kubernetes REST API over HTTPS for kubectl
(``services.apiserver.kubeapi``; default ``DRAFLOW_KUBE_API``, else 127.0.0.1:8443 plus
``DRAFLOW_PORT_OFFSET``), writing ``$DRAFLOW_DATA_DIR/kubeconfig``.

Flags (kube-apiserver's): ``--default-not-ready-toleration-seconds`` and
``--default-unreachable-toleration-seconds`` (300), the ``tolerationSeconds`` the
DefaultTolerationSeconds admission plugin gives every pod for the not-ready / unreachable
NoExecute taints.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from infra.config import add_nats_url_arg
from infra.metrics import add_metrics_arg
from infra.service import ServiceContext, run_service
from services.apiserver.admission.tolerations import DEFAULT_TOLERATION_SECONDS, DefaultTolerationSeconds
from services.apiserver.server import ApiServer


def parse_args(argv: list[str] | None = None) -> tuple[DefaultTolerationSeconds, str | None]:
    p = argparse.ArgumentParser(prog="python -m services.apiserver", description=__doc__)
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
    add_metrics_arg(p)  # read by infra.service.run_service
    add_nats_url_arg(p)  # read by infra.service.run_service
    args = p.parse_args(argv)
    tolerations = DefaultTolerationSeconds(
        args.default_not_ready_toleration_seconds, args.default_unreachable_toleration_seconds
    )
    return tolerations, args.kube_api


def make_serve(
    tolerations: DefaultTolerationSeconds, kube_api: tuple[str, int] | None = None
) -> Callable[[ServiceContext], Coroutine[Any, Any, None]]:
    async def serve(ctx: ServiceContext) -> None:
        server = ApiServer(ctx.store, tolerations=tolerations)
        kube = None
        try:
            await server.start()
            if kube_api is not None:
                from services.apiserver.kubeapi.run import kubeconfig_path, start_kube_api

                try:
                    kube = await start_kube_api(server, ctx.settings, kube_api)
                except OSError as exc:  # the port is taken: serve NATS anyway, as with metrics
                    host, port = kube_api
                    print(
                        f"apiserver: cannot serve the Kubernetes API on {host}:{port}: "
                        f"{exc.strerror or exc} (another system on this machine? give each system its "
                        "own DRAFLOW_PORT_OFFSET)",
                        file=sys.stderr,
                        flush=True,
                    )
                else:
                    print(
                        f"apiserver: Kubernetes API on {kube.url} "
                        f"(kubeconfig: {kubeconfig_path(ctx.settings)})",
                        flush=True,
                    )
            # Tests and the demo wait for this line: the API answers from here on.
            print(f"apiserver: serving {ctx.settings.root}.api.* on {ctx.settings.nats_url}", flush=True)
            await ctx.stop.wait()
        finally:
            if kube is not None:
                await kube.stop()
            await server.stop()

    return serve


def main() -> None:
    tolerations, kube_flag = parse_args()
    try:
        from services.apiserver.kubeapi.run import kube_api_address

        kube_api = kube_api_address(kube_flag)
    except ValueError as exc:
        print(f"apiserver: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(run_service("apiserver", make_serve(tolerations, kube_api)))


if __name__ == "__main__":
    main()
