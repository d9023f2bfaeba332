"""``draflow apply/get/describe/delete`` of a CRD and its objects (printer columns, refusals)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from draflow.events.api.registry import custom_crds, unregister_custom
from tests.builders.crds import FROB_GROUP, frobnicator_crd, make_frob
from tests.services.cli.conftest import Result

pytestmark = pytest.mark.kep4381
Draflow = Callable[..., Result]


@pytest.fixture(autouse=True)
def _forget_custom_kinds() -> Iterator[None]:
    before = set(custom_crds())
    yield
    for name in set(custom_crds()) - before:
        unregister_custom(name)


def test_crd_and_objects_like_built_in_kinds(draflow: Draflow, tmp_path: Path) -> None:
    f = tmp_path / "frob.yaml"
    f.write_text(yaml.safe_dump_all([frobnicator_crd(), make_frob("three", 3), make_frob("default")]))
    applied = draflow("apply", "-f", f)
    assert applied.code == 0, applied.err
    assert applied.out == (
        f"customresourcedefinition.apiextensions.k8s.io/claimparameters.{FROB_GROUP} created\n"
        f"claimparameters.{FROB_GROUP}/three created\n"
        f"claimparameters.{FROB_GROUP}/default created\n"
    )
    table = draflow("get", "claimparameters")
    assert table.out.splitlines() == ["NAME      FROBNICATORS", "default   1", "three     3"]
    described = draflow("describe", "claimparameters", "three")
    assert described.code == 0, described.err
    assert "Kind:         ClaimParameters" in described.out
    assert "Spec:\n  Number Of Frobnicators:  3\n" in described.out

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(make_frob("many", 17)))
    refused = draflow("apply", "-f", bad)
    assert refused.code == 1
    assert refused.err.strip() == (
        f'Error from server (Invalid): error when creating "{bad}": ClaimParameters.{FROB_GROUP} '
        '"default/many" is invalid: spec.numberOfFrobnicators: Invalid value: 17: '
        "spec.numberOfFrobnicators in body should be less than or equal to 16"
    )
    deleted = draflow("delete", "crd", f"claimparameters.{FROB_GROUP}")
    assert deleted.code == 0, deleted.err
    gone = draflow("get", "claimparameters")
    assert gone.code == 1 and 'the server doesn\'t have a resource type "claimparameters"' in gone.err
