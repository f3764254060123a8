"""Tests for gpucluster.dra.semver against Kubernetes' and blang/semver's own expectations.

Tables marked "upstream" are transcribed from
  blang/semver             v4/semver_test.go                   (v4.0.0, commit 4487282d)
  kubernetes/apiserver     pkg/cel/library/semver_test.go       (commit 24a394e5)
  kubernetes/apiserver     pkg/cel/library/semverlib.go doc comments
"""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpucluster.dra.semver import Semver, SemverError

S = Semver.parse


def V(major: int, minor: int, patch: int, pre: tuple[str | int, ...] = (), build: tuple[str, ...] = ()) -> Semver:
    return Semver(major, minor, patch, pre, build)


# upstream: formatTests (blang v4 semver_test.go) -- String() and Parse() both ways
FORMAT_TABLE = [
    (V(1, 2, 3), "1.2.3"),
    (V(0, 0, 1), "0.0.1"),
    (V(0, 0, 1, ("alpha", "preview"), ("123", "456")), "0.0.1-alpha.preview+123.456"),
    (V(1, 2, 3, ("alpha", 1), ("123", "456")), "1.2.3-alpha.1+123.456"),
    (V(1, 2, 3, ("alpha", 1)), "1.2.3-alpha.1"),
    (V(1, 2, 3, (), ("123", "456")), "1.2.3+123.456"),
    # Prereleases and build metadata hyphens
    (V(1, 2, 3, ("alpha", "b-eta"), ("123", "b-uild")), "1.2.3-alpha.b-eta+123.b-uild"),
    (V(1, 2, 3, (), ("123", "b-uild")), "1.2.3+123.b-uild"),
    (V(1, 2, 3, ("alpha", "b-eta")), "1.2.3-alpha.b-eta"),
]


@pytest.mark.parametrize(("version", "text"), FORMAT_TABLE)
def test_format_and_parse(version: Semver, text: str) -> None:
    assert str(version) == text
    parsed = S(text)
    assert parsed == version
    # every field, build metadata included (== ignores it)
    assert (parsed.major, parsed.minor, parsed.patch, parsed.pre, parsed.build) == (
        version.major,
        version.minor,
        version.patch,
        version.pre,
        version.build,
    )
    assert S(text, normalize=True).build == version.build


# upstream: tolerantFormatTests (blang v4) that apply to apiserver's normalizeAndParse, which is
# ParseTolerant without whitespace trimming, plus semverlib.go's documented examples.
NORMALIZE_TABLE = [
    ("v1.2.3", V(1, 2, 3)),
    ("1.2.0-alpha", V(1, 2, 0, ("alpha",))),
    ("1.2.00", V(1, 2, 0)),
    ("01.02.03", V(1, 2, 3)),
    ("00.0.03", V(0, 0, 3)),
    ("000.0.03", V(0, 0, 3)),
    ("1.2", V(1, 2, 0)),
    ("1", V(1, 0, 0)),
    # semverlib.go doc comments / apiserver semver_test.go
    ("v1.0.0", V(1, 0, 0)),
    ("1.0", V(1, 0, 0)),
    ("01.01.01", V(1, 1, 1)),
    ("v01.01", V(1, 1, 0)),
    ("1.1", V(1, 1, 0)),
    # derived: NVIDIA driver versions as published (Masterminds-normalised) and as installed
    ("535.161.08", V(535, 161, 8)),
    ("580.82.07", V(580, 82, 7)),
    ("13.0", V(13, 0, 0)),
    ("v12", V(12, 0, 0)),
    # derived from normalizeAndParse: zeros are trimmed per dot-part, prerelease untouched
    ("1.2.00-rc.1", V(1, 2, 0, ("rc", 1))),
    ("1.2.03-rc.1+b.01", V(1, 2, 3, ("rc", 1), ("b", "01"))),
    ("1.2.0+build", V(1, 2, 0, (), ("build",))),
    ("0.0.0", V(0, 0, 0)),
]


@pytest.mark.parametrize(("text", "expected"), NORMALIZE_TABLE)
def test_normalize(text: str, expected: Semver) -> None:
    got = S(text, normalize=True)
    assert got == expected
    assert got.build == expected.build
    assert str(got) == str(expected)


def test_nvidia_driver_version() -> None:
    with pytest.raises(SemverError, match='Patch number must not contain leading zeroes "08"'):
        S("535.161.08")
    assert str(S("535.161.08", normalize=True)) == "535.161.8"
    assert S("535.161.8") == S("535.161.08", normalize=True)
    assert S("535.161.8") < S("535.161.10")  # numeric, not lexical
    assert S("550.54.15") > S("535.161.8")


# upstream: wrongformatTests (blang v4) -- strict Parse must fail; the reason is blang's text
WRONG_FORMAT_TABLE = [
    ("", "Version string empty"),
    (".", "No Major.Minor.Patch elements found"),
    ("1.", "No Major.Minor.Patch elements found"),
    (".1", "No Major.Minor.Patch elements found"),
    ("a.b.c", 'Invalid character(s) found in major number "a"'),
    ("1.a.b", 'Invalid character(s) found in minor number "a"'),
    ("1.1.a", 'Invalid character(s) found in patch number "a"'),
    ("1.a.1", 'Invalid character(s) found in minor number "a"'),
    ("a.1.1", 'Invalid character(s) found in major number "a"'),
    ("..", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("1..", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("1.1.", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("1..1", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("1.1.+123", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("1.1.-beta", 'strconv.ParseUint: parsing "": invalid syntax'),
    ("-1.1.1", 'Invalid character(s) found in major number "-1"'),
    ("1.-1.1", 'Invalid character(s) found in minor number "-1"'),
    ("1.1.-1", 'strconv.ParseUint: parsing "": invalid syntax'),
    # giant numbers
    ("20000000000000000000.1.1", 'strconv.ParseUint: parsing "20000000000000000000": value out of range'),
    ("1.20000000000000000000.1", 'strconv.ParseUint: parsing "20000000000000000000": value out of range'),
    ("1.1.20000000000000000000", 'strconv.ParseUint: parsing "20000000000000000000": value out of range'),
    ("1.1.1-20000000000000000000", 'strconv.ParseUint: parsing "20000000000000000000": value out of range'),
    # Leading zeroes
    ("01.1.1", 'Major number must not contain leading zeroes "01"'),
    ("001.1.1", 'Major number must not contain leading zeroes "001"'),
    ("1.01.1", 'Minor number must not contain leading zeroes "01"'),
    ("1.001.1", 'Minor number must not contain leading zeroes "001"'),
    ("1.1.01", 'Patch number must not contain leading zeroes "01"'),
    ("1.1.001", 'Patch number must not contain leading zeroes "001"'),
    ("1.1.1-01", 'Numeric PreRelease version must not contain leading zeroes "01"'),
    ("1.1.1-001", 'Numeric PreRelease version must not contain leading zeroes "001"'),
    ("1.1.1-beta.01", 'Numeric PreRelease version must not contain leading zeroes "01"'),
    ("1.1.1-beta.001", 'Numeric PreRelease version must not contain leading zeroes "001"'),
    ("0.0.0-!", 'Invalid character(s) found in prerelease "!"'),
    ("0.0.0+!", 'Invalid character(s) found in build meta data "!"'),
    # empty prversion
    ("0.0.0-.alpha", "Prerelease is empty"),
    # empty build meta data
    ("0.0.0-alpha+", "Build meta data is empty"),
    ("0.0.0-alpha+test.", "Build meta data is empty"),
    # upstream apiserver semver_test.go: parseInvalidVersion and the isSemver(...) == false cases
    ("v1.0", "No Major.Minor.Patch elements found"),
    ("v1.0.0", 'Invalid character(s) found in major number "v1"'),
    (" 1.0.0", 'Invalid character(s) found in major number " 1"'),
    ("1. 0.0", 'Invalid character(s) found in minor number " 0"'),
    ("1.0.0 ", 'Invalid character(s) found in patch number "0 "'),
    ("01.01.01", 'Major number must not contain leading zeroes "01"'),
    ("1", "No Major.Minor.Patch elements found"),
    ("1.1", "No Major.Minor.Patch elements found"),
    # derived
    ("1.2.3-", "Prerelease is empty"),
    ("1.2.3-a..b", "Prerelease is empty"),
    ("1.2.3+a..b", "Build meta data is empty"),
    ("1.2.3-ä", 'Invalid character(s) found in prerelease "ä"'),
    ("\u0661.2.3", 'Invalid character(s) found in major number "\u0661"'),  # ARABIC-INDIC DIGIT ONE
    ("1.2.3.4", 'Invalid character(s) found in patch number "3.4"'),
    ("1.2.3\n", 'Invalid character(s) found in patch number "3\\n"'),
    ("18446744073709551616.0.0", 'strconv.ParseUint: parsing "18446744073709551616": value out of range'),
    ("1.2.3-18446744073709551616", 'strconv.ParseUint: parsing "18446744073709551616": value out of range'),
]


@pytest.mark.parametrize(("text", "reason"), WRONG_FORMAT_TABLE)
def test_wrong_format(text: str, reason: str) -> None:
    with pytest.raises(SemverError) as info:
        S(text)
    assert info.value.reason == reason
    assert str(info.value).startswith("invalid semver ")
    assert str(info.value).endswith(": " + reason)


# upstream: wrongTolerantFormatTests (blang v4) and apiserver semver_test.go isSemver(x, true)
# false cases; normalisation does not trim whitespace (unlike blang's ParseTolerant).
WRONG_NORMALIZE_TABLE = [
    ("1.0+abc", "short version cannot contain PreRelease/Build meta data"),
    ("1.0-rc.1", 'Invalid character(s) found in minor number "0-rc"'),
    ("", 'strconv.ParseUint: parsing "": invalid syntax'),
    (" 1.0.0", 'Invalid character(s) found in major number "0 1"'),
    ("1. 0.0", 'Invalid character(s) found in minor number "0 0"'),
    ("1.0.0 ", 'Invalid character(s) found in patch number "0 "'),
    ("\t1.2.3 ", 'Invalid character(s) found in major number "0\\t1"'),  # blang ParseTolerant accepts
    # derived
    ("1-alpha", "short version cannot contain PreRelease/Build meta data"),
    ("1+build", "short version cannot contain PreRelease/Build meta data"),
    ("vv1.0.0", 'Invalid character(s) found in major number "0v1"'),  # only one "v" is stripped
    ("V1.0.0", 'Invalid character(s) found in major number "0V1"'),
    ("1.2.3-01", 'Numeric PreRelease version must not contain leading zeroes "01"'),
]


@pytest.mark.parametrize(("text", "reason"), WRONG_NORMALIZE_TABLE)
def test_wrong_normalize(text: str, reason: str) -> None:
    with pytest.raises(SemverError) as info:
        S(text, normalize=True)
    assert info.value.reason == reason


def test_error_names_input() -> None:
    with pytest.raises(SemverError, match=r'^invalid semver "v1\.0": No Major\.Minor\.Patch elements found$'):
        S("v1.0")
    assert issubclass(SemverError, ValueError)
    with pytest.raises(SemverError) as info:
        S("x" * 10_000)
    assert len(str(info.value)) < 1000


# upstream: compareTests (blang v4), both directions, plus apiserver semver_test.go comparisons
COMPARE_TABLE = [
    (V(1, 0, 0), V(1, 0, 0), 0),
    (V(2, 0, 0), V(1, 0, 0), 1),
    (V(0, 1, 0), V(0, 1, 0), 0),
    (V(0, 2, 0), V(0, 1, 0), 1),
    (V(0, 0, 1), V(0, 0, 1), 0),
    (V(0, 0, 2), V(0, 0, 1), 1),
    (V(1, 2, 3), V(1, 2, 3), 0),
    (V(2, 2, 4), V(1, 2, 4), 1),
    (V(1, 3, 3), V(1, 2, 3), 1),
    (V(1, 2, 4), V(1, 2, 3), 1),
    # Spec Examples #11
    (V(1, 0, 0), V(2, 0, 0), -1),
    (V(2, 0, 0), V(2, 1, 0), -1),
    (V(2, 1, 0), V(2, 1, 1), -1),
    # Spec Examples #9
    (V(1, 0, 0), V(1, 0, 0, ("alpha",)), 1),
    (V(1, 0, 0, ("alpha",)), V(1, 0, 0, ("alpha", 1)), -1),
    (V(1, 0, 0, ("alpha", 1)), V(1, 0, 0, ("alpha", "beta")), -1),
    (V(1, 0, 0, ("alpha", "beta")), V(1, 0, 0, ("beta",)), -1),
    (V(1, 0, 0, ("beta",)), V(1, 0, 0, ("beta", 2)), -1),
    (V(1, 0, 0, ("beta", 2)), V(1, 0, 0, ("beta", 11)), -1),
    (V(1, 0, 0, ("beta", 11)), V(1, 0, 0, ("rc", 1)), -1),
    (V(1, 0, 0, ("rc", 1)), V(1, 0, 0), -1),
    # Ignore Build metadata
    (V(1, 0, 0, (), ("1", "2", "3")), V(1, 0, 0), 0),
    # apiserver semver_test.go
    (S("1.2.3"), S("1.2.3"), 0),
    (S("1.0.0"), S("1.2.3"), -1),
    (S("1.2.3"), S("1.0.0"), 1),
    (S("1.2.3"), S("0.1.2"), 1),
    (S("1.2.3"), S("2.0.0"), -1),
    (S("v01.01", normalize=True), S("1.1.0"), 0),
    # derived: ASCII ordering of alphanumeric identifiers; numeric < alphanumeric
    (S("1.0.0-Z"), S("1.0.0-a"), -1),
    (S("1.0.0-a-b"), S("1.0.0-a"), 1),
    (S("1.0.0-9"), S("1.0.0-a"), -1),
    (S("1.0.0-10"), S("1.0.0-9"), 1),
    (S("1.0.0-01a"), S("1.0.0-1"), 1),
    (S("1.0.0+a"), S("1.0.0+b"), 0),
]


@pytest.mark.parametrize(("a", "b", "expected"), COMPARE_TABLE)
def test_compare(a: Semver, b: Semver, expected: int) -> None:
    assert a.compare(b) == expected
    assert b.compare(a) == -expected
    assert (a == b) is (expected == 0)
    assert (a != b) is (expected != 0)
    assert (a < b) is (expected < 0)
    assert (a <= b) is (expected <= 0)
    assert (a > b) is (expected > 0)
    assert (a >= b) is (expected >= 0)
    if expected == 0:
        assert hash(a) == hash(b)


def test_equality_ignores_build_metadata() -> None:
    # apiserver's Semver.Equal is blang's Version.EQ, i.e. Compare() == 0.
    a, b = S("1.2.3+a"), S("1.2.3+b")
    assert a == b
    assert len({a, b, S("1.2.3")}) == 1
    assert str(a) == "1.2.3+a"  # but the metadata is kept
    assert S("1.2.3-rc.1+x") != S("1.2.3-rc.1.0")
    assert S("1.2.3") != "1.2.3"
    with pytest.raises(TypeError):
        _ = S("1.2.3") < "1.2.4"


def test_immutable_and_typed() -> None:
    v = S("1.2.3-rc.1+b.7")
    assert v.pre == ("rc", 1)
    assert isinstance(v.pre[1], int)
    assert v.build == ("b", "7")
    with pytest.raises(AttributeError):
        v.major = 2  # type: ignore[misc]


def test_uint64_bounds() -> None:
    biggest = (1 << 64) - 1
    v = S(f"{biggest}.{biggest}.{biggest}-{biggest}")
    assert (v.major, v.minor, v.patch, v.pre) == (biggest, biggest, biggest, (biggest,))


# ---------------------------------------------------------------------------------------------
# hypothesis properties

numeric_ids = st.one_of(st.just(0), st.integers(1, 10**12))
alnum_ids = st.from_regex(r"[0-9A-Za-z-]*[A-Za-z-][0-9A-Za-z-]*", fullmatch=True).filter(lambda s: len(s) < 12)
build_ids = st.from_regex(r"[0-9A-Za-z-]{1,10}", fullmatch=True)


@st.composite
def versions(draw: st.DrawFn) -> Semver:
    major, minor, patch = (draw(st.integers(0, 30)) for _ in range(3))
    pre = tuple(draw(st.lists(st.one_of(numeric_ids, alnum_ids), max_size=3)))
    build = tuple(draw(st.lists(build_ids, max_size=2)))
    return Semver(major, minor, patch, pre, build)


def sort_key(v: Semver) -> tuple[object, ...]:
    """SemVer 2.0.0 precedence as an independent sort key (release after its prereleases)."""
    ids = tuple((0, x, "") if isinstance(x, int) else (1, 0, x) for x in v.pre)
    return (v.major, v.minor, v.patch, not v.pre, ids)


@given(versions())
def test_string_round_trip(v: Semver) -> None:
    text = str(v)
    assert re.fullmatch(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?", text)
    parsed = S(text)
    assert parsed == v
    assert (parsed.pre, parsed.build) == (v.pre, v.build)
    assert str(parsed) == text
    # normalisation leaves strictly valid versions alone
    normalized = S(text, normalize=True)
    assert str(normalized) == text


@given(versions(), versions())
def test_ordering_matches_precedence(a: Semver, b: Semver) -> None:
    ka, kb = sort_key(a), sort_key(b)
    expected = (ka > kb) - (ka < kb)
    assert a.compare(b) == expected
    assert b.compare(a) == -expected
    assert (a == b) is (expected == 0)
    if a == b:
        assert hash(a) == hash(b)


@given(st.lists(versions(), max_size=8))
def test_sort_is_consistent(vs: list[Semver]) -> None:
    ordered = sorted(vs)
    assert all(x <= y for x, y in itertools.pairwise(ordered))


@given(
    st.sampled_from(["", "v"]),
    st.integers(0, 999),
    st.integers(0, 999),
    st.integers(0, 999),
    st.integers(0, 3),
    st.integers(0, 3),
    st.integers(0, 3),
)
def test_normalize_strips_zeros_and_v(prefix: str, a: int, b: int, c: int, za: int, zb: int, zc: int) -> None:
    text = f"{prefix}{'0' * za}{a}.{'0' * zb}{b}.{'0' * zc}{c}"
    assert S(text, normalize=True) == V(a, b, c)
    assert str(S(text, normalize=True)) == f"{a}.{b}.{c}"
    assert S(f"{prefix}{'0' * za}{a}.{'0' * zb}{b}", normalize=True) == V(a, b, 0)
    assert S(f"{prefix}{'0' * za}{a}", normalize=True) == V(a, 0, 0)
    if prefix == "" and za == zb == zc == 0:
        assert S(text) == V(a, b, c)
    else:
        with pytest.raises(SemverError):
            S(text)


@given(st.text(max_size=12))
def test_arbitrary_text_never_crashes(text: str) -> None:
    for normalize in (False, True):
        try:
            v = S(text, normalize=normalize)
        except SemverError:
            continue
        assert S(str(v)) == v
        if not normalize:
            assert str(v) == text
