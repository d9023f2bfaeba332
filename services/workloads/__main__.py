"""``python -m draflow.services.workloads [--job-run-seconds S] [--job-pod-failure-backoff-seconds S]``:
the Deployment / Job controller until SIGTERM.

A Job's pods whose commands the kubelets' simulated runtime does not understand "run" for
``--job-run-seconds`` (or ``DRAFLOW_JOB_RUN_SECONDS``; default 5) before they succeed, unless the
Job's ``workloads.draflow.io/run-seconds`` annotation says otherwise. Failed Job pods are replaced
after the pod-failure back-off, ``--job-pod-failure-backoff-seconds`` (10, as upstream) doubling
per failure.
"""

from __future__ import annotations

if __name__ == "__main__":
    # run as a service: a SIGTERM or Ctrl-C that arrives while the imports below load is recorded,
    # then stops the service cleanly (draflow.infra.signals)
    from draflow.infra.signals import install_early

    install_early()

import argparse
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from draflow.infra.config import add_nats_url_arg
from draflow.infra.metrics import add_metrics_arg
from draflow.infra.service import ServiceContext, run_service
from draflow.services.runtime.controller import Runtime
from draflow.services.workloads.job import DEFAULT_POD_FAILURE_BACKOFF_S, DEFAULT_RUN_SECONDS
from draflow.services.workloads.service import ACTOR, WorkloadsService


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m draflow.services.workloads", description=__doc__)
    default = float(os.environ.get("DRAFLOW_JOB_RUN_SECONDS") or DEFAULT_RUN_SECONDS)
    parser.add_argument(
        "--job-run-seconds",
        type=float,
        default=default,
        help=f"simulated run time of a Job's pod before it succeeds (default {default:g})",
    )
    parser.add_argument(
        "--job-pod-failure-backoff-seconds",
        type=float,
        default=DEFAULT_POD_FAILURE_BACKOFF_S,
        help="wait before replacing a Job's first failed pod, doubling per failure "
        f"(default {DEFAULT_POD_FAILURE_BACKOFF_S:g})",
    )
    add_metrics_arg(parser)  # read by draflow.infra.service.run_service
    add_nats_url_arg(parser)  # read by draflow.infra.service.run_service
    args = parser.parse_args(argv)
    if args.job_run_seconds < 0:
        parser.error("--job-run-seconds: must be >= 0")
    if args.job_pod_failure_backoff_seconds < 0:
        parser.error("--job-pod-failure-backoff-seconds: must be >= 0")
    return args


def make_main(
    job_run_seconds: float, pod_failure_backoff_s: float = DEFAULT_POD_FAILURE_BACKOFF_S
) -> Callable[[ServiceContext], Coroutine[Any, Any, None]]:
    async def main(ctx: ServiceContext) -> None:
        rt = Runtime(ctx.store, actor=ACTOR)
        await rt.start()
        await rt.wait_for_apiserver()
        try:
            print(f"{ACTOR}: following {ctx.settings.root}.ev.> on {ctx.settings.nats_url}", flush=True)
            service = WorkloadsService(
                rt, job_run_seconds=job_run_seconds, pod_failure_backoff_s=pod_failure_backoff_s
            )
            await rt.run(ctx.stop, service.sync, resync_s=1.0)
        finally:
            await rt.stop()

    return main


if __name__ == "__main__":
    args = parse_args()
    sys.exit(run_service(ACTOR, make_main(args.job_run_seconds, args.job_pod_failure_backoff_seconds)))
