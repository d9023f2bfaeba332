"""Admission for the API server: pure defaulting and validation of decoded API objects.

``apply_defaults(obj, namespace="default")`` returns the object as Kubernetes would store it;
``validate(obj, old=None)`` returns every ``FieldError`` (empty list = valid). ``check_cel`` is
the single switch point between the lenient CEL syntax check and the project's CEL compiler.
"""

from __future__ import annotations

from draflow.events.api.errors import FieldError
from draflow.services.apiserver.admission.cel import check_cel
from draflow.services.apiserver.admission.defaults import (
    apply_defaults,
    prepare_for_create,
    prepare_for_update,
)
from draflow.services.apiserver.admission.validate import admit, check_admin_access, validate

__all__ = [
    "FieldError",
    "admit",
    "apply_defaults",
    "check_admin_access",
    "check_cel",
    "prepare_for_create",
    "prepare_for_update",
    "validate",
]
