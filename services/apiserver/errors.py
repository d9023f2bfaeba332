"""Kubernetes-shaped refusals: the Status codes, reasons and messages the API server uses.

Messages follow apimachinery's wording (``resourceclaims.resource.k8s.io "x" not found``,
``ResourceClaim.resource.k8s.io "x" is invalid: spec.devices.requests[0].name: Required value``)
so the CLI can print them the way kubectl does.
"""

from __future__ import annotations

from events.api.errors import DECODE, REQUIRED, UNKNOWN_FIELD, ApiError, FieldError
from services.runtime.protocol import Cause, StatusError, qualified_kind, qualified_resource

__all__ = [
    "already_exists",
    "bad_request",
    "conflict",
    "forbidden",
    "from_api_error",
    "internal",
    "invalid",
    "namespace_not_found",
    "not_found",
]


def not_found(kind: str, name: str) -> StatusError:
    return StatusError.of(404, "NotFound", f'{qualified_resource(kind)} "{name}" not found')


def namespace_not_found(namespace: str) -> StatusError:
    return StatusError.of(404, "NotFound", f'namespaces "{namespace}" not found')


def already_exists(kind: str, name: str) -> StatusError:
    return StatusError.of(409, "AlreadyExists", f'{qualified_resource(kind)} "{name}" already exists')


def conflict(kind: str, name: str, detail: str = "") -> StatusError:
    why = (
        detail
        or "the object has been modified; please apply your changes to the latest version and try again"
    )
    return StatusError.of(
        409, "Conflict", f'Operation cannot be fulfilled on {qualified_resource(kind)} "{name}": {why}'
    )


def forbidden(kind: str, name: str, detail: str) -> StatusError:
    return StatusError.of(403, "Forbidden", f'{qualified_resource(kind)} "{name}" is forbidden: {detail}')


def bad_request(message: str) -> StatusError:
    return StatusError.of(400, "BadRequest", message)


def internal(message: str) -> StatusError:
    return StatusError.of(500, "InternalError", f"Internal error occurred: {message}")


def _field_text(e: FieldError) -> str:
    return f"{e.path}: {e.rule}" if e.path else e.rule


def _causes(errors: list[FieldError]) -> list[Cause]:
    return [Cause(field=e.path, reason=e.type, message=e.rule) for e in errors]


def _ref(namespace: str, name: str) -> str:
    """``namespace/name`` for namespaced objects: the message names exactly which object was refused."""
    return f"{namespace}/{name}" if namespace and name else name


def invalid(kind: str, name: str, errors: list[FieldError], namespace: str = "") -> StatusError:
    """422 Invalid listing every field error (one error bare, several in brackets, as upstream).

    Unlike apimachinery, the quoted name carries the namespace (``"default/gpu"``): draflow users
    apply many namespaces from one file and the message must say which object was refused.
    """
    texts = [_field_text(e) for e in errors]
    shown = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    message = f'{qualified_kind(kind)} "{_ref(namespace, name)}" is invalid: {shown}'
    return StatusError.of(422, "Invalid", message, _causes(errors))


def _decode_text(e: FieldError) -> str:
    if e.type == UNKNOWN_FIELD:
        return f'strict decoding error: unknown field "{e.path}"{e.rule}'
    return _field_text(e)


def from_api_error(exc: ApiError, api_version: str, kind: str, name: str, namespace: str = "") -> StatusError:
    """Map the model's ApiError (decode or validation) to the refusal the API server would send."""
    errors = exc.errors or [FieldError(kind=kind, type=DECODE, rule=str(exc))]
    first = errors[0]
    if first.rule.startswith("no matches for kind"):
        return StatusError.of(404, "NoKindMatch", first.rule)
    if first.path in ("apiVersion", "kind") and first.type == REQUIRED:
        return bad_request(f"error validating data: {first.rule}")
    if any(e.type in (DECODE, UNKNOWN_FIELD) for e in errors):
        if not kind or not api_version:
            return bad_request("; ".join(_decode_text(e) for e in errors))
        detail = ", ".join(_decode_text(e) for e in errors)
        which = f' "{_ref(namespace, name)}"' if name else ""
        message = (
            f'{kind}{which} in version "{api_version.rsplit("/", 1)[-1]}" cannot be handled as a {kind}: '
            f"{detail}"
        )
        return StatusError.of(400, "BadRequest", message, _causes(errors))
    return invalid(kind, name, errors, namespace)
