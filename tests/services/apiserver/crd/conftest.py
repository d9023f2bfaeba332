"""Custom kinds are served process-wide (the registry): each test stops serving the ones it made."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from draflow.events.api.registry import custom_crds, unregister_custom


@pytest.fixture(autouse=True)
def _forget_custom_kinds() -> Iterator[None]:
    before = set(custom_crds())
    yield
    for name in set(custom_crds()) - before:
        unregister_custom(name)
