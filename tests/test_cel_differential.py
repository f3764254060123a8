"""Differential test: compiled CEL programs vs cel-python's interpreter (the test oracle).

A seeded generator builds well-typed selectors over generated devices; every selector is
evaluated by gpucluster.dra.cel and by celpy (tests/cel_oracle.py); both must agree on
the boolean result or both fail. The corpus stays where celpy agrees with Kubernetes, so it
excludes celpy's known divergences (see the oracle's docstring): no ill-typed expressions
(celpy has no checker), no cross-type numeric equality (celpy errors on ``dyn(1) == 1.0``),
no ``==`` between a Quantity/Semver and another type (Kubernetes errors, celpy says false),
regexes only in the syntax both RE2 and Python's ``re`` read alike, no error inside
``exists_one`` (celpy raises it past ``&&``/``||`` instead of returning an error value), and
none of the extension libraries celpy lacks (strings, lists, optional types, bind).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from gpucluster.dra.cel import CelError, compile_selector, device_view
from gpucluster.dra.cel.view import DeviceView
from tests.cel_oracle import OracleProgram

DOMAIN = "gpu.nvidia.com"
PRODUCTS = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB", "NVIDIA L4", "Tesla T4"]
VERSIONS = ["550.54.15", "535.161.8", "580.82.7", "1.0.0-rc.1", "560.0.0"]
MEMORIES = ["80Gi", "40Gi", "24Gi", "16Gi", "81559Mi", "0.5Ti"]
ARCHS = ["Hopper", "Ampere", "Ada Lovelace", "Turing"]


def make_devices(rng: random.Random, n: int) -> list[DeviceView]:
    views = []
    for i in range(n):
        attrs: dict[str, Any] = {}
        if rng.random() < 0.9:
            attrs["productName"] = {"string": rng.choice(PRODUCTS)}
        if rng.random() < 0.9:
            attrs["index"] = {"int": rng.randint(-3, 9)}
        if rng.random() < 0.9:
            attrs["mig"] = {"bool": rng.random() < 0.5}
        if rng.random() < 0.9:
            attrs["driverVersion"] = {"version": rng.choice(VERSIONS)}
        if rng.random() < 0.8:
            attrs["architecture"] = {"string": rng.choice(ARCHS)}
        if rng.random() < 0.7:
            attrs["resource.kubernetes.io/pciBusID"] = {"string": f"0000:{rng.randint(0, 255):02x}:00.0"}
        caps: dict[str, Any] = {}
        if rng.random() < 0.9:
            caps["memory"] = {"value": rng.choice(MEMORIES)}
        views.append(device_view(DOMAIN, {"name": f"gpu-{i}", "attributes": attrs, "capacity": caps}))
    return views


class Gen:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def attr(self, name: str) -> str:
        if self.rng.random() < 0.5:
            return f'device.attributes["{DOMAIN}"].{name}'
        return f'device.attributes["{DOMAIN}"]["{name}"]'

    def string(self) -> str:
        r = self.rng.random()
        if r < 0.45:
            return self.attr("productName")
        if r < 0.75:
            return self.attr("architecture")
        if r < 0.85:
            return 'device.attributes["resource.kubernetes.io"].pciBusID'
        if r < 0.9:
            return self.attr("noSuchString")
        return '"' + self.rng.choice(PRODUCTS + ARCHS) + '"'

    def integer(self, depth: int) -> str:
        r = self.rng.random()
        if depth > 0 and r < 0.3:
            op = self.rng.choice(["+", "-", "*", "/", "%"])
            right = str(self.rng.randint(-4, 4)) if op not in "/%" else str(self.rng.choice([1, 2, 3, -2, 0]))
            return f"({self.integer(depth - 1)} {op} {right})"
        if r < 0.75:
            return self.attr("index")
        if r < 0.8:
            return f"{self.string()}.size()"
        if r < 0.85:
            return f'{self.attr("driverVersion")}.compareTo(semver("{self.rng.choice(VERSIONS)}"))'
        return str(self.rng.randint(-5, 10))

    def boolean(self, depth: int) -> str:
        rng = self.rng
        choices = [
            lambda: f'{self.string()} == "{rng.choice(PRODUCTS + ARCHS)}"',
            lambda: f'{self.string()} != "{rng.choice(PRODUCTS + ARCHS)}"',
            lambda: f"{self.integer(depth)} {rng.choice(['<', '<=', '>', '>=', '==', '!='])} {self.integer(depth)}",
            lambda: self.attr("mig"),
            lambda: f'{self.string()}.startsWith("{rng.choice(["NVIDIA", "Tesla", "A", ""])}")',
            lambda: f'{self.string()}.endsWith("{rng.choice(["GB", "HBM3", "4", "per"])}")',
            lambda: f'{self.string()}.contains("{rng.choice(["100", "L", "x"])}")',
            lambda: f'{self.string()}.matches("{rng.choice(["^NVIDIA", "[0-9]+GB", "H1.0", "^Tesla T[0-9]$"])}")',
            lambda: f'has(device.attributes["{DOMAIN}"].{rng.choice(["productName", "mig", "nothing"])})',
            lambda: f'"{rng.choice(["index", "mig", "nothing"])}" in device.attributes["{DOMAIN}"]',
            lambda: f'"{rng.choice([DOMAIN, "resource.kubernetes.io", "x.io"])}" in device.attributes',
            lambda: f"{self.integer(0)} in [{rng.randint(-2, 2)}, {rng.randint(0, 5)}, 7]",
            lambda: (
                f"{self.string()} in [{', '.join(repr(p).replace(chr(39), chr(34)) for p in rng.sample(PRODUCTS, 2))}]"
            ),
            lambda: (
                f'device.capacity["{DOMAIN}"].memory.compareTo(quantity("{rng.choice(MEMORIES)}")) '
                f"{rng.choice(['<', '>=', '=='])} 0"
            ),
            lambda: f'device.capacity["{DOMAIN}"].memory.isGreaterThan(quantity("{rng.choice(MEMORIES)}"))',
            lambda: f'{self.attr("driverVersion")}.isLessThan(semver("{rng.choice(VERSIONS)}"))',
            lambda: f"[1, 2, 3].exists(x, x == {self.integer(0)})",
            lambda: f"[0, 2, 4].all(x, x <= {self.integer(0)})",
            # celpy raises out of exists_one() instead of returning an error value, so that
            # && and || cannot absorb it: keep its predicate error-free.
            lambda: f"[1, 2, 3].exists_one(x, x > {rng.randint(0, 3)})",
            lambda: f'device.attributes["{DOMAIN}"].exists(k, k == "{rng.choice(["mig", "index", "zzz"])}")',
            lambda: f'device.driver == "{rng.choice([DOMAIN, "other"])}"',
            lambda: rng.choice(["true", "false"]),
        ]
        if depth > 0:
            choices += [
                lambda: f"!({self.boolean(depth - 1)})",
                lambda: f"({self.boolean(depth - 1)} && {self.boolean(depth - 1)})",
                lambda: f"({self.boolean(depth - 1)} || {self.boolean(depth - 1)})",
                lambda: f"({self.boolean(depth - 1)} ? {self.boolean(depth - 1)} : {self.boolean(depth - 1)})",
                lambda: f"({self.boolean(depth - 1)} && {self.boolean(depth - 1)} || {self.boolean(depth - 1)})",
            ]
        return rng.choice(choices)()


def outcome(value: bool | Exception) -> str:
    return "error" if isinstance(value, Exception) else str(value)


@pytest.mark.parametrize("seed", range(6))
def test_compiled_programs_agree_with_celpy(seed: int) -> None:
    rng = random.Random(seed)
    devices = make_devices(rng, 24)
    gen = Gen(rng)
    checked = 0
    for _ in range(120):
        expr = gen.boolean(depth=3)
        program = compile_selector(expr)
        oracle = OracleProgram(expr)
        for view in devices:
            ours: bool | Exception
            try:
                ours = program.evaluate(view)
            except CelError as exc:
                ours = exc
            theirs = oracle.evaluate(view)
            assert outcome(ours) == outcome(theirs), (
                f"{expr!r} on {view.name} ({dict(view.attributes)}): ours={ours!r} celpy={theirs!r}"
            )
            checked += 1
    assert checked == 120 * 24
