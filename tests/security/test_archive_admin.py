"""Only the admin trims the log: on a real authenticated server, every other credential is
refused by the archiver before it writes anything, and by the server if it tried the trim's
stream updates itself; the admin archives and trims."""

from __future__ import annotations

import json

import pytest

from draflow.infra.archive import archive_dir
from draflow.infra.auth.roles import ADMIN
from draflow.infra.eventstore import EventStore
from draflow.infra.streams import event_stream_config
from draflow.services.runtime.archiving import ArchiveRefused, Retention, archive_and_trim
from tests.security.system import SecuredServer

EVERYTHING_OLD = Retention(older_than_s=1e-6)


@pytest.mark.parametrize("role", ["cli", "apiserver", "scheduler"])
async def test_no_role_but_the_admin_trims(secured: SecuredServer, role: str) -> None:
    store = await EventStore.open(secured.as_role(role), role)
    try:
        with pytest.raises(ArchiveRefused, match=f"only the admin may \\(this is {role}\\)"):
            await archive_and_trim(store, EVERYTHING_OLD, margin=0)
        # the trim's first step, asked directly: the server refuses the stream update
        config = json.dumps(event_stream_config(store.settings).as_dict()).encode()
        with pytest.raises(Exception, match=r"timeout|[Pp]ermissions"):
            await store.nc.request(f"$JS.API.STREAM.UPDATE.{store.stream}", config, timeout=2)
    finally:
        await store.close()
    assert not archive_dir(secured.settings).exists()


async def test_the_admin_archives(secured: SecuredServer) -> None:
    """The positive control: the admin's run goes through (nothing to archive without a snapshot)."""
    store = await EventStore.open(secured.as_role(ADMIN), "admin")
    try:
        run = await archive_and_trim(store, EVERYTHING_OLD, margin=0)
        assert run.segments == [] and run.first_after == run.first_before
    finally:
        await store.close()
