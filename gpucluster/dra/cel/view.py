"""The ``device`` variable of a DRA selector: one device of a ResourceSlice seen from CEL.

Like ``DeviceMatches`` in ``dynamic-resource-allocation/cel/compile.go``: attributes and
capacities are grouped by domain (an unqualified name belongs to the driver's domain, a
qualified one is split at the first ``/``), looking up an unknown domain yields an empty map,
and version attributes are semantic versions, capacities Quantities.

Views are cheap to build: they keep the ResourceSlice's own dicts and convert an attribute only
when an expression reads it (parsed Semver and Quantity values are shared through caches), so
the per-domain maps are only materialised for expressions that need whole maps. Kubernetes
converts every attribute before evaluating and fails on an attribute without a supported value
or with an unparsable version even when the expression does not read it: a caller that must
fail the same way asks :func:`conversion_error` once per device (the API server rejects such
slices, so only input that bypassed validation has them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from gpucluster.dra.cel.errors import CelRuntimeError
from gpucluster.dra.cel.library import _QUANTITY_CACHE as _QUANTITIES
from gpucluster.dra.cel.library import _SEMVER_STRICT as _SEMVERS
from gpucluster.dra.cel.library import parse_quantity, parse_semver
from gpucluster.dra.quantity import Quantity, QuantityError
from gpucluster.dra.semver import SemverError


class DomainMap(dict[str, dict[str, Any]]):
    """``device.attributes`` / ``device.capacity``: an unknown domain reads as an empty map.

    As in Kubernetes (whose wrapper only overrides ``Find``), ``in`` and ``size()`` see the
    domains that exist, while indexing, field selection and ``has()`` see every domain.
    """

    __slots__ = ()


EMPTY_MAP: Final[dict[str, Any]] = {}


class LazyDomain(dict[str, Any]):
    """One domain of ``device.attributes`` / ``device.capacity``, read from the slice on demand.

    ``get`` and ``[]`` look the name up in the device's raw map and convert that one value, so
    ``device.attributes["gpu.nvidia.com"][name]`` converts one attribute, not every attribute of
    the device. ``in``, ``size()`` and iteration (what ``exists``/``all`` over the keys need)
    first enter every name of the domain with its raw value, unconverted; the operations that
    see values (items, values, equality, printing) convert them all. Converted values replace
    raw ones (raw values are dicts, converted ones never are).
    """

    __slots__ = ("_convert", "_domain", "_driver", "_filled", "_keyed", "_raw", "_shapes")

    def __init__(
        self, convert: Any, domain: str, driver: str, raw: Mapping[str, Any], shapes: _Table | None = None
    ) -> None:
        # No dict.__init__: the map starts empty.
        self._convert = convert
        self._domain = domain
        self._driver = driver
        self._raw = raw
        self._shapes = shapes
        self._keyed = False
        self._filled = False

    def _names(self) -> _DomainNames:
        return shape_of(self._raw, self._driver, self._shapes).get(self._domain, _NO_NAMES)

    def _qualified(self, key: str) -> str:
        return key if self._domain == self._driver else f"{self._domain}/{key}"

    def _fill_keys(self) -> None:
        if self._keyed:
            return
        self._keyed = True
        raw = self._raw
        idents, qualified_names, _ = self._names()
        for ident, qualified in zip(idents, qualified_names, strict=True):
            if dict.__contains__(self, ident):
                continue
            value = raw[qualified]
            # A raw value that is no dict cannot stay unconverted (a dict marks "not yet"):
            # convert it now, which reports it as unsupported.
            dict.__setitem__(self, ident, value if type(value) is dict else self._convert(qualified, value))

    def _fill(self) -> None:
        if self._filled:
            return
        self._fill_keys()
        self._filled = True
        for key, value in list(dict.items(self)):
            if type(value) is dict:
                dict.__setitem__(self, key, self._convert(self._qualified(key), value))

    def get(self, key: Any, default: Any = None) -> Any:
        value = dict.get(self, key, _ABSENT)
        if value is _ABSENT:
            if self._keyed or type(key) is not str:
                return default
            raw = self._raw
            # An unqualified name is the driver's own; "example.com/rack" is never found here.
            value = raw.get(key) if self._domain == self._driver and "/" not in key else None
            if value is None:
                value = raw.get(self._domain + "/" + key)
                if value is None:
                    return default
        elif type(value) is not dict:
            return value
        if self._convert is convert_attribute and value.__class__ is dict:
            text = value.get("string")  # the common case, as convert_attribute has it
            if text.__class__ is str and len(value) == 1:
                dict.__setitem__(self, key, text)
                return text
        value = self._convert(self._qualified(key), value)
        dict.__setitem__(self, key, value)
        return value

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, _ABSENT)
        if value is _ABSENT:
            raise KeyError(key)
        return value

    # Names alone come from the shape of the raw map: nothing is converted or copied.
    def __contains__(self, key: object) -> bool:
        return key in self._names()[2]

    def __len__(self) -> int:
        return len(self._names()[0])

    def __iter__(self) -> Any:
        return iter(self._names()[0])

    def keys(self) -> Any:
        self._fill_keys()
        return dict.keys(self)

    def items(self) -> Any:
        self._fill()
        return dict.items(self)

    def values(self) -> Any:
        self._fill()
        return dict.values(self)

    def copy(self) -> dict[str, Any]:
        self._fill()
        return dict(dict.items(self))

    def __eq__(self, other: object) -> bool:
        self._fill()
        if isinstance(other, LazyDomain):
            other._fill()
        return dict.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = None

    def __repr__(self) -> str:
        self._fill()
        return dict.__repr__(self)


_ABSENT: Final = object()

# One domain's names in a raw attribute or capacity map: the identifiers in map order, the
# qualified name each was read from, and the identifiers as a set.
_DomainNames = tuple[tuple[str, ...], tuple[str, ...], frozenset[str]]
_NO_NAMES: Final[_DomainNames] = ((), (), frozenset())

# Domain names by the names of a raw map, for one driver.
_Table = dict[tuple[str, ...], dict[str, _DomainNames]]


class Shapes:
    """How raw attribute/capacity maps split into domains, by driver and names; one per call.

    The devices of a cluster nearly always share a few sets of attribute names, so views built
    with one ``Shapes`` (``slice_views(s, shapes=...)`` over every slice of one call) split names
    into domains once per distinct set instead of once per device and operation. Keyed by value
    and owned by the caller: it lives as long as the views built with it, never process-wide.
    """

    __slots__ = ("_tables",)

    def __init__(self) -> None:
        self._tables: dict[str, _Table] = {}

    def table(self, driver: str) -> _Table:
        found = self._tables.get(driver)
        if found is None:
            found = self._tables[driver] = {}
        return found


def shape_of(raw: Mapping[str, Any], driver: str, table: _Table | None) -> dict[str, _DomainNames]:
    """The names of each domain of a raw attribute/capacity map (first occurrence wins)."""
    key = tuple(raw)
    if table is not None:
        found = table.get(key)
        if found is not None:
            return found
    groups: dict[str, tuple[list[str], list[str], set[str]]] = {}
    for qualified in key:
        domain, ident = _split(qualified, driver)
        group = groups.get(domain)
        if group is None:
            group = groups[domain] = ([], [], set())
        if ident not in group[2]:
            group[0].append(ident)
            group[1].append(qualified)
            group[2].add(ident)
    result = {d: (tuple(i), tuple(q), frozenset(n)) for d, (i, q, n) in groups.items()}
    if table is not None:
        table[key] = result
    return result


def _split(name: str, driver: str) -> tuple[str, str]:
    sep = name.find("/")
    if sep < 0:
        return driver, name
    return name[:sep], name[sep + 1 :]


def convert_attribute(name: str, attr: Any) -> Any:
    """The CEL value of one ``DeviceAttribute`` (``{"int"|"bool"|"string"|"version": v}``)."""
    if type(attr) is dict and len(attr) == 1:
        value = attr.get("string")
        if value.__class__ is str:
            return value
        value = attr.get("version")
        if value.__class__ is str:
            cached = _SEMVERS.get(value)
            if cached is not None:
                return cached
    if isinstance(attr, Mapping):
        for key, value in attr.items():
            if value is None:
                continue
            if key == "string" and type(value) is str:
                return value
            if key == "int" and type(value) is int:
                return value
            if key == "bool" and type(value) is bool:
                return value
            if key == "version" and type(value) is str:
                try:
                    return parse_semver(value)
                except SemverError as exc:
                    raise CelRuntimeError(f"attribute {name}: parse semantic version: {exc}") from None
    raise CelRuntimeError(f"attribute {name}: unsupported attribute value")


# DRAListTypeAttributes: the list fields of a DeviceAttribute, in getAttributeValue's order.
LIST_FIELDS: Final = (("ints", int), ("bools", bool), ("strings", str), ("versions", str))


def convert_attribute_lists(name: str, attr: Any) -> Any:
    """:func:`convert_attribute` with DRAListTypeAttributes on: a list field (``ints``, ``bools``,
    ``strings``, ``versions``; present, even empty) comes first and is a CEL list, as
    ``getAttributeValue`` has it; otherwise the scalar as without the gate."""
    if isinstance(attr, Mapping):
        for key, kind in LIST_FIELDS:
            values = attr.get(key)
            if values is None:
                continue
            if type(values) is not list or any(type(v) is not kind for v in values):
                break  # not a list of that kind: the API server would not have stored it
            if key != "versions":
                return list(values)
            try:
                return [parse_semver(v) for v in values]
            except SemverError as exc:
                raise CelRuntimeError(f"attribute {name}: parse semantic version: {exc}") from None
        else:
            return convert_attribute(name, attr)
    raise CelRuntimeError(f"attribute {name}: unsupported attribute value")


def list_conversion_error(view: DeviceView) -> str:
    """:func:`conversion_error` with DRAListTypeAttributes on (list attributes convert)."""
    return list_attributes_conversion_error(view._raw_attrs)


def list_attributes_conversion_error(raw: Mapping[str, Any]) -> str:
    """:func:`list_conversion_error` of a device's raw ``attributes`` map."""
    for name, attr in raw.items():
        try:
            convert_attribute_lists(name, attr)
        except CelRuntimeError as exc:
            return exc.message
    return ""


def conversion_error(view: DeviceView) -> str:
    """Why Kubernetes' ``DeviceMatches`` fails for this device before evaluating any expression
    (``attribute <name>: unsupported attribute value``, ``...: parse semantic version: ...``);
    "" when every attribute converts."""
    return attributes_conversion_error(view._raw_attrs)


def attributes_conversion_error(raw: Mapping[str, Any]) -> str:
    """:func:`conversion_error` of a device's raw ``attributes`` map (no view needed)."""
    try:
        # Every device of every node is checked: the common shapes first, without converting.
        for attr in raw.values():
            if attr.get("string").__class__ is str:
                continue
            value = attr.get("version")
            if value in _SEMVERS and value.__class__ is str:
                continue
            if attr.get("int").__class__ is int:
                continue
            value = attr.get("bool")
            if value is True or value is False:
                continue
            break
        else:
            return ""
    except (AttributeError, TypeError):
        pass  # not a map, or an unhashable version value: convert_attribute says what is wrong
    for name, attr in raw.items():
        try:
            convert_attribute(name, attr)
        except CelRuntimeError as exc:
            return exc.message
    return ""


def convert_capacity(name: str, cap: Any) -> Quantity:
    if type(cap) is dict:
        value = cap.get("value")
        cached = _QUANTITIES.get(value) if value.__class__ is str else None
        if cached is not None:
            return cached
    value = cap.get("value") if isinstance(cap, Mapping) else cap
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, str):
        try:
            return parse_quantity(value)
        except QuantityError as exc:
            raise CelRuntimeError(f"capacity {name}: {exc}") from None
    raise CelRuntimeError(f"capacity {name}: unsupported capacity value")


class DeviceView:
    """The CEL value of ``device`` for one device (see the module docstring)."""

    __slots__ = ("_attrs", "_caps", "_device", "_doms", "_multi", "_raw_attrs", "_raw_caps", "_shapes", "driver")

    cel_type_name: Final = "kubernetes.DRADevice"

    def __init__(
        self,
        driver: str,
        device: Mapping[str, Any],
        allow_multiple_allocations: bool | None = None,
        names: _Table | None = None,
    ) -> None:
        # names: Shapes.table(driver) of the call's Shapes, resolved once per slice by the caller.
        self.driver = driver
        self._shapes = names
        self._device = device
        self._raw_attrs: Mapping[str, Any] = device.get("attributes") or EMPTY_MAP
        self._raw_caps: Mapping[str, Any] = device.get("capacity") or EMPTY_MAP
        self._multi = allow_multiple_allocations
        self._attrs: DomainMap | None = None
        self._caps: DomainMap | None = None
        self._doms: dict[str, LazyDomain] | None = None

    @property
    def name(self) -> str:
        return str(self._device.get("name", ""))

    @property
    def allow_multiple_allocations(self) -> bool:
        """``device.allowMultipleAllocations`` (false when unset)."""
        if self._multi is None:
            return self._device.get("allowMultipleAllocations") is True
        return self._multi

    def __repr__(self) -> str:
        return f"DeviceView(driver={self.driver!r}, name={self.name!r})"

    def _attribute_converter(self) -> Callable[[str, Any], Any]:
        """How an attribute becomes a CEL value (ListDeviceView: with DRAListTypeAttributes)."""
        return convert_attribute

    # -- whole maps ------------------------------------------------------------------------
    @property
    def attributes(self) -> DomainMap:
        m = self._attrs
        if m is None:
            m = self._attrs = self._domains(self._raw_attrs, self._attribute_converter())
        return m

    @property
    def capacity(self) -> DomainMap:
        m = self._caps
        if m is None:
            m = self._caps = self._domains(self._raw_caps, convert_capacity)
        return m

    def _domains(self, raw: Mapping[str, Any], convert: Any) -> DomainMap:
        """The domains present, each a :class:`LazyDomain` (values converted when read)."""
        m = DomainMap()
        driver, shapes = self.driver, self._shapes
        for domain in shape_of(raw, driver, shapes):
            m[domain] = LazyDomain(convert, domain, driver, raw, shapes)
        return m

    def attr_domain(self, domain: str) -> dict[str, Any]:
        """``device.attributes[domain]`` for a constant domain, without looking at other domains."""
        cache = self._doms
        if cache is None:
            cache = self._doms = {}
        m = cache.get(domain)
        if m is None:
            m = cache[domain] = LazyDomain(
                self._attribute_converter(), domain, self.driver, self._raw_attrs, self._shapes
            )
        return m

    def cap_domain(self, domain: str) -> dict[str, Any]:
        """``device.capacity[domain]`` for a constant domain."""
        cache = self._doms
        if cache is None:
            cache = self._doms = {}
        key = "\x00" + domain  # capacity domains next to attribute domains in one cache
        m = cache.get(key)
        if m is None:
            m = cache[key] = LazyDomain(convert_capacity, domain, self.driver, self._raw_caps, self._shapes)
        return m

    def attr_names(self, domain: str) -> tuple[str, ...]:
        """The names in ``device.attributes[domain]``, in map order (nothing converted)."""
        table = self._shapes
        if table is not None:  # shape_of's first step, inline: the common case is one lookup
            found = table.get(tuple(self._raw_attrs))
            if found is not None:
                return found.get(domain, _NO_NAMES)[0]
        return shape_of(self._raw_attrs, self.driver, table).get(domain, _NO_NAMES)[0]

    def cap_names(self, domain: str) -> tuple[str, ...]:
        """The names in ``device.capacity[domain]``."""
        return shape_of(self._raw_caps, self.driver, self._shapes).get(domain, _NO_NAMES)[0]

    # -- single values (what compiled selectors use for constant domain and name) ----------
    def _raw(self, raw: Mapping[str, Any], domain: str, ident: str) -> Any:
        if domain == self.driver and "/" not in ident:
            found = raw.get(ident)
            if found is not None:
                return found
        return raw.get(domain + "/" + ident)

    def attr_value(self, domain: str, ident: str) -> Any:
        """``device.attributes[domain][ident]``, or the error ``no such key: ident``."""
        raw = self._raw_attrs
        attr = raw.get(ident) if domain == self.driver and "/" not in ident else None
        if attr is None:
            attr = raw.get(domain + "/" + ident)
            if attr is None:
                raise CelRuntimeError(f"no such key: {ident}")
        if attr.__class__ is dict:
            value = attr.get("string")
            if value.__class__ is str:
                return value
            value = attr.get("version")
            if value.__class__ is str:
                cached = _SEMVERS.get(value)
                if cached is not None:
                    return cached
        return convert_attribute(ident if domain == self.driver else f"{domain}/{ident}", attr)

    def has_attr(self, domain: str, ident: str) -> bool:
        return self._raw(self._raw_attrs, domain, ident) is not None

    def cap_value(self, domain: str, ident: str) -> Quantity:
        """``device.capacity[domain][ident]``, or the error ``no such key: ident``."""
        raw = self._raw_caps
        cap = raw.get(ident) if domain == self.driver and "/" not in ident else None
        if cap is None:
            cap = raw.get(domain + "/" + ident)
            if cap is None:
                raise CelRuntimeError(f"no such key: {ident}")
        if cap.__class__ is dict:
            value = cap.get("value")
            cached = _QUANTITIES.get(value) if value.__class__ is str else None
            if cached is not None:
                return cached
        return convert_capacity(ident if domain == self.driver else f"{domain}/{ident}", cap)

    def has_cap(self, domain: str, ident: str) -> bool:
        return self._raw(self._raw_caps, domain, ident) is not None

    def field(self, name: str) -> Any:
        if name == "driver":
            return self.driver
        if name == "attributes":
            return self.attributes
        if name == "capacity":
            return self.capacity
        if name == "allowMultipleAllocations":
            return self.allow_multiple_allocations
        raise CelRuntimeError(f"no such field '{name}'")


class ListDeviceView(DeviceView):
    """A :class:`DeviceView` with DRAListTypeAttributes on: list attributes are CEL lists."""

    __slots__ = ()

    def _attribute_converter(self) -> Callable[[str, Any], Any]:
        return convert_attribute_lists

    def attr_value(self, domain: str, ident: str) -> Any:
        # No scalar fast path: a list field comes first (getAttributeValue's order).
        attr = self._raw(self._raw_attrs, domain, ident)
        if attr is None:
            raise CelRuntimeError(f"no such key: {ident}")
        return convert_attribute_lists(ident if domain == self.driver else f"{domain}/{ident}", attr)


def device_view(
    driver: str,
    device: Mapping[str, Any],
    *,
    allow_multiple_allocations: bool | None = None,
    shapes: Shapes | None = None,
    list_type_attributes: bool = False,
) -> DeviceView:
    """The view of one entry of a ResourceSlice's ``spec.devices`` (resource.k8s.io/v1).

    Views that share ``shapes`` (see :class:`Shapes`) split attribute names into domains once
    per distinct set of names. ``list_type_attributes``: DRAListTypeAttributes is on.
    """
    cls = ListDeviceView if list_type_attributes else DeviceView
    return cls(driver, device, allow_multiple_allocations, shapes.table(driver) if shapes is not None else None)


def slice_views(
    resource_slice: Mapping[str, Any], shapes: Shapes | None = None, list_type_attributes: bool = False
) -> list[DeviceView]:
    """Views of every device of a ResourceSlice (``spec.devices``), in order.

    Not cached: a view only points into the slice's own dicts and converts what is read, so
    building one costs about as much as a cache lookup would, and a caller that evaluates many
    selectors over the same slices keeps the list itself (conversions stay on the views). Pass
    one :class:`Shapes` for all slices of a call (a new one per slice otherwise).
    ``list_type_attributes``: DRAListTypeAttributes is on (:class:`ListDeviceView`).
    """
    spec = resource_slice.get("spec") or {}
    driver = str(spec.get("driver") or "")
    table = (shapes or Shapes()).table(driver)
    cls = ListDeviceView if list_type_attributes else DeviceView
    return [cls(driver, device, None, table) for device in spec.get("devices") or []]
