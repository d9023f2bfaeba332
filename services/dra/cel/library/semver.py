"""Kubernetes' CEL semver library (k8s.io/apiserver pkg/cel/library/semverlib.go, version 1).

Parsing follows blang/semver v4 (strict: ``MAJOR.MINOR.PATCH[-pre][+build]``, no leading zeros);
``semver(s, true)`` / ``isSemver(s, true)`` first normalise a ``v`` prefix, leading zeros and
missing minor/patch parts. Comparison ignores build metadata.
"""

from __future__ import annotations

import re
from functools import lru_cache

from ..errors import EvalError
from ..types import BOOL, INT, SEMVER, STRING
from ..values import Semver
from . import register

__all__ = ["SemverError", "parse_semver"]

_ALNUM = re.compile(r"[0-9A-Za-z-]*")
_NUM = re.compile(r"[0-9]*")
_UINT64_MAX = 2**64 - 1


class SemverError(ValueError):
    """Not a semantic version; the message is blang/semver's."""


def _number(part: str, what: str) -> int:
    if not _NUM.fullmatch(part):
        raise SemverError(f"Invalid character(s) found in {what} number {_quote(part)}")
    if len(part) > 1 and part[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {_quote(part)}")
    if not part or int(part) > _UINT64_MAX:
        raise SemverError(f"strconv.ParseUint: parsing {_quote(part)}: invalid syntax")
    return int(part)


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


@lru_cache(maxsize=4096)
def parse_semver(text: str) -> Semver:
    """Parse a strict semantic version; raises SemverError with blang/semver's message."""
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major")
    minor = _number(parts[1], "minor")
    rest = parts[2]
    build: list[str] = []
    pre_strs: list[str] = []
    if "+" in rest:
        rest, _, b = rest.partition("+")
        build = b.split(".")
    if "-" in rest:
        rest, _, p = rest.partition("-")
        pre_strs = p.split(".")
    patch = _number(rest, "patch")
    pre: list[int | str] = []
    for s in pre_strs:
        if not s:
            raise SemverError("Prerelease is empty")
        if _NUM.fullmatch(s):
            if len(s) > 1 and s[0] == "0":
                raise SemverError(f"Numeric PreRelease version must not contain leading zeroes {_quote(s)}")
            pre.append(int(s))
        elif _ALNUM.fullmatch(s):
            pre.append(s)
        else:
            raise SemverError(f"Invalid character(s) found in prerelease {_quote(s)}")
    for s in build:
        if not s:
            raise SemverError("Build meta data is empty")
        if not _ALNUM.fullmatch(s):
            raise SemverError(f"Invalid character(s) found in build meta data {_quote(s)}")
    return Semver(major, minor, patch, tuple(pre), tuple(build))


def _normalize(text: str) -> str:
    text = text.removeprefix("v")
    parts = text.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or not p[0].isdigit() or not p[0].isascii():
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise SemverError("short version cannot contain PreRelease/Build meta data")
        parts.extend(["0"] * (3 - len(parts)))
    return ".".join(parts)


def _semver(text: str, normalize: bool = False) -> Semver:
    try:
        return parse_semver(_normalize(text) if normalize else text)
    except SemverError as exc:
        raise EvalError(str(exc)) from None


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _semver(text, normalize)
    except EvalError:
        return False
    return True


def _cmp(a: Semver, b: Semver) -> int:
    return (a.key > b.key) - (a.key < b.key)


register("semver", "string_to_semver", False, (STRING,), SEMVER)(_semver)
register("semver", "string_bool_to_semver", False, (STRING, BOOL), SEMVER)(_semver)
register("isSemver", "is_semver_string", False, (STRING,), BOOL)(_is_semver)
register("isSemver", "is_semver_string_bool", False, (STRING, BOOL), BOOL)(_is_semver)
register("isGreaterThan", "semver_is_greater_than", True, (SEMVER, SEMVER), BOOL)(lambda a, b: a.key > b.key)
register("isLessThan", "semver_is_less_than", True, (SEMVER, SEMVER), BOOL)(lambda a, b: a.key < b.key)
register("compareTo", "semver_compare_to", True, (SEMVER, SEMVER), INT)(_cmp)
register("major", "semver_major", True, (SEMVER,), INT)(lambda v: v.major)
register("minor", "semver_minor", True, (SEMVER,), INT)(lambda v: v.minor)
register("patch", "semver_patch", True, (SEMVER,), INT)(lambda v: v.patch)
