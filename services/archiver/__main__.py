"""``python -m draflow.services.archiver``: scheduled archiving until SIGTERM (admin credential).

Moves history older than ``DRAFLOW_RETENTION_S`` (default 7 days) and/or past
``DRAFLOW_RETENTION_BYTES`` out of the stream into verified archive segments under
``$DRAFLOW_ARCHIVE_DIR`` (default ``$DRAFLOW_DATA_DIR/archive``), as ``draflow archive`` does,
whenever at least ``DRAFLOW_ARCHIVE_MIN_EVENTS`` are due. See docs/history.md.
"""

from __future__ import annotations

if __name__ == "__main__":
    from draflow.infra.signals import install_early

    install_early()

import sys

from draflow.infra.auth.roles import ADMIN
from draflow.infra.service import ServiceContext, run_service
from draflow.services.archiver.service import Archiver, ArchiverSettings

NAME = "archiver"


async def main(ctx: ServiceContext) -> None:
    settings = ArchiverSettings.from_env()
    r = settings.retention
    print(
        f"{NAME}: keeping {r.older_than_s:.0f}s of history"
        + (f" and about {r.max_bytes} bytes" if r.max_bytes else "")
        + f" in stream {ctx.settings.stream}; archive at {ctx.store.archive.folder}",
        flush=True,
    )
    await Archiver(ctx.store, settings).run(ctx.stop)


if __name__ == "__main__":
    sys.exit(run_service(NAME, main, role=ADMIN))
