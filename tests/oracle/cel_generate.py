"""Random DRA CEL selectors and devices, seeded and reproducible, for the CEL differential test.

Expressions come from a small grammar over the DRA environment: attributes of every type
(string, int, bool, version, and with DRAListTypeAttributes lists), capacities as quantities,
``device.driver`` and ``device.allowMultipleAllocations``, the quantity and semver libraries,
``has`` and ``in``, ``cel.bind``, the list macros, string functions, arithmetic that overflows
or divides by zero, ternaries, ``dyn``, and ``includes``. Some are ill-typed (a compile error)
and many fail at run time (a missing key, an overflow, a bad regex), and errors are combined
with ``&&``/``||`` so that absorption is exercised.
"""

from __future__ import annotations

import random
from typing import Any

DOMAIN = "dra.example.com"
OTHER = "other.example.com"
STRINGS = ("a100", "h100", "l4", "", "A100", "h100-80gb")
VERSIONS = ("1.0.0", "1.2.3", "2.0.0-rc.1", "10.0.0", "0.9.1+build.5")
QUANTITIES = ("1", "1Gi", "40Gi", "80Gi", "500m", "1.5Ti", "1024Mi", "0")


class CelGen:
    def __init__(self, rng: random.Random, lists: bool, consumable: bool) -> None:
        self.rng = rng
        self.lists = lists
        self.consumable = consumable

    def pick(self, *options: Any) -> Any:
        return self.rng.choice(options)

    # ------------------------------------------------------------------ leaves

    def attr(self, name: str) -> str:
        r = self.rng.random()
        if r < 0.45:
            return f'device.attributes["{DOMAIN}"].{name}'
        if r < 0.9:
            return f'device.attributes["{DOMAIN}"]["{name}"]'
        return f'device.attributes["{OTHER}"].{name}'

    def string(self, depth: int) -> str:
        options = [
            lambda: self.attr("model"),
            lambda: f'"{self.pick(*STRINGS)}"',
            lambda: "device.driver",
            lambda: f"{self.string(depth + 1)}.lowerAscii()",
            lambda: f'{self.string(depth + 1)} + "-x"',
        ]
        return self.rng.choice(options[:3] if depth > 2 else options)()

    def integer(self, depth: int) -> str:
        options = [
            lambda: self.attr("index"),
            lambda: str(self.pick(0, 1, 7, -3, 9223372036854775807)),
            lambda: f"{self.integer(depth + 1)} + {self.integer(depth + 1)}",
            lambda: f"{self.integer(depth + 1)} * {self.integer(depth + 1)}",
            lambda: f"{self.integer(depth + 1)} / {self.integer(depth + 1)}",
            lambda: f"{self.integer(depth + 1)} % {self.pick(0, 2, 3)}",
            lambda: f"size({self.string(depth + 1)})",
            lambda: f'device.capacity["{DOMAIN}"].memory.compareTo(quantity("{self.pick(*QUANTITIES)}"))',
        ]
        return self.rng.choice(options[:2] if depth > 2 else options)()

    def quantity(self) -> str:
        return self.pick(
            f'device.capacity["{DOMAIN}"].memory',
            f'device.capacity["{DOMAIN}"]["cores"]',
            f'quantity("{self.pick(*QUANTITIES)}")',
        )

    def version(self) -> str:
        return self.pick(self.attr("driverVersion"), f'semver("{self.pick(*VERSIONS)}")')

    def lst(self) -> str:
        base = [f'["{self.pick(*STRINGS)}", "{self.pick(*STRINGS)}"]', "[1, 2, 3]", "[]"]
        if self.lists:
            base += [self.attr("ids"), self.attr("tags")]
        return self.rng.choice(base)

    # ------------------------------------------------------------------ booleans

    def boolean(self, depth: int = 0) -> str:
        rng = self.rng
        leaves = [
            lambda: self.attr("healthy"),
            lambda: f"{self.string(depth + 1)} == {self.string(depth + 1)}",
            lambda: (
                f"{self.integer(depth + 1)} {self.pick('<', '<=', '>', '>=', '==', '!=')} {self.integer(depth + 1)}"
            ),
            lambda: f"{self.quantity()}.{self.pick('isGreaterThan', 'isLessThan')}({self.quantity()})",
            lambda: f"{self.quantity()}.compareTo({self.quantity()}) {self.pick('>=', '<', '==')} 0",
            lambda: f"{self.version()}.{self.pick('isGreaterThan', 'isLessThan')}({self.version()})",
            lambda: f"{self.version()}.compareTo({self.version()}) == 0",
            lambda: f'isQuantity("{self.pick(*QUANTITIES, "1x", "")}")',
            lambda: f'isSemver("{self.pick(*VERSIONS, "v1.0.0", "1.0")}"{self.pick("", ", true")})',
            lambda: f'"{self.pick("model", "index", "missing")}" in device.attributes["{DOMAIN}"]',
            lambda: f'"{self.pick(DOMAIN, OTHER)}" in device.attributes',
            lambda: f'has(device.attributes["{DOMAIN}"].{self.pick("model", "healthy", "missing")})',
            lambda: (
                f'{self.string(depth + 1)}.{self.pick("startsWith", "endsWith", "contains")}("{self.pick("a", "100", "")}")'
            ),
            lambda: f'{self.string(depth + 1)}.matches("{self.pick("^a[0-9]+$", "h1", "(", ".*")}")',
            lambda: f'device.driver == "{self.pick(DOMAIN, OTHER)}"',
            lambda: self.pick("true", "false"),
            # ill-typed: compile errors
            lambda: f"{self.attr('index')} == {self.pick('true', chr(34) + 'x' + chr(34), '1.5')}",
            lambda: f"dyn({self.attr('index')}) == {self.pick('1', '1.0', chr(34) + '1' + chr(34))}",
            lambda: f"{self.quantity()} == {self.quantity()}",
        ]
        if self.consumable:
            leaves.append(lambda: "device.allowMultipleAllocations")
        if self.lists:
            leaves += [
                lambda: f"{self.attr('ids')}.includes({self.pick('1', '4', chr(34) + 'x' + chr(34))})",
                lambda: f"{self.attr('tags')}.includes({self.pick(chr(34) + 'x' + chr(34), chr(34) + 'q' + chr(34))})",
                lambda: f"{self.attr('model')}.includes({chr(34)}a100{chr(34)})",
            ]
        if depth > 2 or rng.random() < 0.35:
            return rng.choice(leaves)()
        composite = [
            lambda: f"{self.boolean(depth + 1)} && {self.boolean(depth + 1)}",
            lambda: f"{self.boolean(depth + 1)} || {self.boolean(depth + 1)}",
            lambda: f"!({self.boolean(depth + 1)})",
            lambda: f"({self.boolean(depth + 1)} ? {self.boolean(depth + 1)} : {self.boolean(depth + 1)})",
            lambda: f"cel.bind(x, {self.attr('index')}, x > {self.pick(0, 3)} && x < {self.pick(5, 9)})",
            lambda: f'cel.bind(d, device.attributes["{DOMAIN}"], "model" in d && d.model == "{self.pick(*STRINGS)}")',
            lambda: f"{self.lst()}.{self.pick('all', 'exists', 'exists_one')}(v, v == v)",
            lambda: f"{self.lst()}.exists(v, {self.string(depth + 1)} == {self.string(depth + 1)})",
            lambda: f"size({self.lst()}.filter(v, v != {self.pick('1', chr(34) + 'a100' + chr(34))})) > 0",
            lambda: f"{self.lst()}.map(v, v).size() == {self.pick(0, 2, 3)}",
            lambda: f"{self.string(depth + 1)} in {self.lst()}",
        ]
        return rng.choice(composite)()

    # ------------------------------------------------------------------ devices

    def device(self) -> dict[str, Any]:
        rng = self.rng
        attrs: dict[str, Any] = {}
        if rng.random() < 0.85:
            attrs["model"] = {"string": rng.choice(STRINGS)}
        if rng.random() < 0.85:
            attrs["index"] = {"int": rng.choice((0, 1, 5, -2, 9223372036854775807))}
        if rng.random() < 0.8:
            attrs["healthy"] = {"bool": rng.random() < 0.5}
        if rng.random() < 0.8:
            attrs["driverVersion"] = {"version": rng.choice(VERSIONS)}
        if rng.random() < 0.3:
            attrs[f"{OTHER}/model"] = {"string": rng.choice(STRINGS)}
        if self.lists or rng.random() < 0.05:
            if rng.random() < 0.5:
                attrs["ids"] = {"ints": rng.sample(range(1, 6), rng.randint(1, 3))}
            if rng.random() < 0.5:
                attrs["tags"] = {"strings": rng.sample(("x", "y", "z"), rng.randint(1, 2))}
        caps: dict[str, Any] = {}
        if rng.random() < 0.85:
            caps["memory"] = {"value": rng.choice(QUANTITIES)}
        if rng.random() < 0.4:
            caps["cores"] = {"value": rng.choice(("4", "8", "500m"))}
        device: dict[str, Any] = {"name": "dev-0", "attributes": attrs, "capacity": caps}
        if rng.random() < 0.3:
            device["allowMultipleAllocations"] = rng.random() < 0.7
        return device


def generate(seed: int, version: str) -> dict[str, Any]:
    rng = random.Random(f"cel/{seed}/{version}")
    minor = int(version.split(".")[1])
    lists = minor >= 36 and rng.random() < 0.5
    consumable = rng.random() < 0.5
    gen = CelGen(rng, lists, consumable)
    return {
        "seed": seed,
        "version": version,
        "gates": {"DRAConsumableCapacity": consumable, "DRAListTypeAttributes": lists},
        "expression": gen.boolean(),
        "driver": DOMAIN,
        "device": gen.device(),
    }
