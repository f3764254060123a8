"""Semantic versions with the semantics of Kubernetes' CEL ``semver`` library.

A behavioural re-implementation (not a port) of what ``k8s.io/apiserver/pkg/cel/library``
(``semverlib.go``) does: ``semver(s)`` is ``github.com/blang/semver/v4``'s ``Parse`` and
``semver(s, true)`` is ``normalizeAndParse`` followed by ``Parse``.

Strict parsing (blang ``Parse``):

* exactly ``MAJOR.MINOR.PATCH`` (split on the first two dots), each non-empty ASCII digits,
  no leading zeros, each at most 2^64-1;
* then an optional ``-`` prerelease and ``+`` build metadata: the build part starts at the first
  ``+``, the prerelease at the first ``-`` before it; both are dot-separated, non-empty
  identifiers of ``[0-9A-Za-z-]``; an all-digit prerelease identifier is numeric, must not have
  leading zeros and must fit in uint64 (blang is stricter than SemVer 2.0.0 here);
* no leading ``v``, no whitespace anywhere.

Normalising parsing (``semver(s, true)`` / ``isSemver(s, true)``): strip one leading ``v``; split
into at most three parts on ``.``; in every part longer than one character strip leading ``0``s
(re-adding a single ``0`` if nothing, or a non-digit, would be left first, so ``"00"`` -> ``"0"``
and ``"0-rc"`` stays ``"0-rc"``); if there are fewer than three parts, the last must not contain
``+`` or ``-`` and missing parts become ``0``; then strict parsing. No whitespace trimming
(unlike blang's ``ParseTolerant``).

Equality and hashing follow Kubernetes' CEL ``Semver.Equal`` (blang ``Version.EQ``, i.e.
``Compare == 0``): build metadata is ignored, so ``1.0.0+a == 1.0.0+b``. Ordering is SemVer
precedence (numeric identifiers below alphanumeric ones, alphanumeric ones compared by ASCII).

Not reproduced: CEL's ``major()``/``minor()``/``patch()`` return ``int64(v.Major)`` in Go, which
wraps for components above 2^63-1; here the components are exact Python ints (the CEL layer
should decide what to do with such values).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from gpucluster.dra.ordering import Ordered
from gpucluster.dra.valueerrors import ValueParseError, quote_input

__all__ = ["Semver", "SemverError"]

_UINT64_MAX: Final = (1 << 64) - 1
_DIGITS_RE: Final = re.compile(r"[0-9]*")
_ALPHANUM_RE: Final = re.compile(r"[0-9A-Za-z-]*")


class SemverError(ValueParseError):
    """A string is not a semantic version; ``str(err)`` names the input.

    ``err.reason`` is blang/semver's own error text (e.g. ``No Major.Minor.Patch elements found``).
    """


class _Invalid(Exception):
    """Internal: a blang error text, wrapped into SemverError by ``Semver.parse``."""


def _parse_uint(s: str) -> int:
    """``strconv.ParseUint(s, 10, 64)`` for a string already known to be ASCII digits."""
    if not s:
        raise _Invalid('strconv.ParseUint: parsing "": invalid syntax')
    digits = s.lstrip("0")
    if len(digits) > 20 or int(digits or "0") > _UINT64_MAX:
        raise _Invalid(f"strconv.ParseUint: parsing {quote_input(s)}: value out of range")
    return int(s)


def _component(part: str, name: str) -> int:
    if _DIGITS_RE.fullmatch(part) is None:
        raise _Invalid(f"Invalid character(s) found in {name} number {quote_input(part)}")
    if len(part) > 1 and part[0] == "0":
        raise _Invalid(f"{name.capitalize()} number must not contain leading zeroes {quote_input(part)}")
    return _parse_uint(part)


def _prerelease_id(s: str) -> str | int:
    """blang ``NewPRVersion``."""
    if not s:
        raise _Invalid("Prerelease is empty")
    if _DIGITS_RE.fullmatch(s) is not None:
        if len(s) > 1 and s[0] == "0":
            raise _Invalid(f"Numeric PreRelease version must not contain leading zeroes {quote_input(s)}")
        return _parse_uint(s)
    if _ALPHANUM_RE.fullmatch(s) is not None:
        return s
    raise _Invalid(f"Invalid character(s) found in prerelease {quote_input(s)}")


def _strict(s: str) -> Semver:
    """blang/semver v4 ``Parse``."""
    if not s:
        raise _Invalid("Version string empty")
    parts = s.split(".", 2)
    if len(parts) != 3:
        raise _Invalid("No Major.Minor.Patch elements found")
    major = _component(parts[0], "major")
    minor = _component(parts[1], "minor")

    patch_str = parts[2]
    build: tuple[str, ...] = ()
    prerelease: list[str] = []
    plus = patch_str.find("+")
    if plus != -1:
        build = tuple(patch_str[plus + 1 :].split("."))
        patch_str = patch_str[:plus]
    dash = patch_str.find("-")
    if dash != -1:
        prerelease = patch_str[dash + 1 :].split(".")
        patch_str = patch_str[:dash]
    patch = _component(patch_str, "patch")

    pre = tuple(_prerelease_id(p) for p in prerelease)
    for b in build:
        if not b:
            raise _Invalid("Build meta data is empty")
        if _ALPHANUM_RE.fullmatch(b) is None:
            raise _Invalid(f"Invalid character(s) found in build meta data {quote_input(b)}")
    return Semver(major, minor, patch, pre, build)


def _normalize(s: str) -> str:
    """apiserver ``normalizeAndParse`` up to (excluding) the final ``semver.Parse``."""
    s = s.removeprefix("v")
    parts = s.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or p[0] not in "0123456789":
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise _Invalid("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return ".".join(parts)


def _compare_identifiers(a: str | int, b: str | int) -> int:
    if isinstance(a, int):
        if isinstance(b, int):
            return (a > b) - (a < b)
        return -1
    if isinstance(b, int):
        return 1
    return (a > b) - (a < b)


@dataclass(frozen=True, eq=False, slots=True)
class Semver(Ordered):
    """An immutable semantic version; ``==``, ``<`` and ``hash`` ignore build metadata.

    ``pre`` holds numeric identifiers as ``int`` and alphanumeric ones as ``str``.
    """

    major: int
    minor: int
    patch: int
    pre: tuple[str | int, ...] = ()
    build: tuple[str, ...] = ()

    @classmethod
    def parse(cls, s: str, *, normalize: bool = False) -> Semver:
        """CEL ``semver(s)`` (strict) or ``semver(s, true)`` (``normalize=True``)."""
        try:
            return _strict(_normalize(s) if normalize else s)
        except _Invalid as err:
            raise SemverError(f"invalid semver {quote_input(s)}: {err}", str(err)) from None

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by SemVer precedence (blang ``Version.Compare``; build metadata ignored)."""
        for a, b in ((self.major, other.major), (self.minor, other.minor), (self.patch, other.patch)):
            if a != b:
                return 1 if a > b else -1
        pa, pb = self.pre, other.pre
        if not pa or not pb:
            return (not pa) - (not pb)  # a release ranks above any of its prereleases
        for x, y in zip(pa, pb, strict=False):
            c = _compare_identifiers(x, y)
            if c:
                return c
        return (len(pa) > len(pb)) - (len(pa) < len(pb))

    def _order(self, other: Semver) -> int:
        return self.compare(other)

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    def __str__(self) -> str:
        """blang ``Version.String``."""
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(str(p) for p in self.pre)
        if self.build:
            text += "+" + ".".join(self.build)
        return text
