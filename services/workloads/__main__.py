"""``python -m services.workloads [--job-run-seconds S]``: the Deployment / Job controller until SIGTERM.

A Job's pods "run" for ``--job-run-seconds`` (or ``DRAFLOW_JOB_RUN_SECONDS``; default 5) before
they succeed, unless the Job's ``workloads.draflow.io/run-seconds`` annotation says otherwise.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from infra.config import add_nats_url_arg
from infra.metrics import add_metrics_arg
from infra.service import ServiceContext, run_service
from services.runtime.controller import Runtime
from services.workloads.job import DEFAULT_RUN_SECONDS
from services.workloads.service import ACTOR, WorkloadsService


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m services.workloads", description=__doc__)
    default = float(os.environ.get("DRAFLOW_JOB_RUN_SECONDS") or DEFAULT_RUN_SECONDS)
    parser.add_argument(
        "--job-run-seconds",
        type=float,
        default=default,
        help=f"simulated run time of a Job's pod before it succeeds (default {default:g})",
    )
    add_metrics_arg(parser)  # read by infra.service.run_service
    add_nats_url_arg(parser)  # read by infra.service.run_service
    args = parser.parse_args(argv)
    if args.job_run_seconds < 0:
        parser.error("--job-run-seconds: must be >= 0")
    return args


def make_main(job_run_seconds: float) -> Callable[[ServiceContext], Coroutine[Any, Any, None]]:
    async def main(ctx: ServiceContext) -> None:
        rt = Runtime(ctx.store, actor=ACTOR)
        await rt.start()
        await rt.wait_for_apiserver()
        try:
            print(f"{ACTOR}: following {ctx.settings.root}.ev.> on {ctx.settings.nats_url}", flush=True)
            await rt.run(ctx.stop, WorkloadsService(rt, job_run_seconds=job_run_seconds).sync, resync_s=1.0)
        finally:
            await rt.stop()

    return main


if __name__ == "__main__":
    sys.exit(run_service(ACTOR, make_main(parse_args().job_run_seconds)))
