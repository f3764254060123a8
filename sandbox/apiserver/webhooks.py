"""Admission webhooks, as kube-apiserver's MutatingAdmissionWebhook and ValidatingAdmissionWebhook
plugins run them (k8s.io/apiserver ``pkg/admission/plugin/webhook``).

``WebhookAdmission(core).install()`` adds one mutating and one validating hook to
``ApiCore.admission``. On every write they read the stored Mutating/ValidatingWebhookConfigurations
(admissionregistration.k8s.io/v1) and:

* order the webhooks by configuration name, then by their position in the configuration;
* decide whether to call each one like ``ShouldCallHook``: namespaceSelector (namespace labels;
  cluster-scoped objects other than Namespaces always match), objectSelector (new or old object
  labels), rules (apiGroups, apiVersions, resources with ``*`` and ``resource/subresource``,
  operations, scope), ``matchPolicy: Equivalent`` (another served version of the same resource),
  then matchConditions (CEL over ``object``, ``oldObject``, ``request`` with celpy; a false
  condition skips the webhook, an evaluation error fails the request with 403 under
  ``failurePolicy: Fail`` and skips the webhook under ``Ignore``);
* mutating webhooks run one after another; a webhook that changed the object makes every earlier
  webhook with ``reinvocationPolicy: IfNeeded`` run once more (one reinvocation round, as
  upstream); ``JSONPatch`` responses are applied, then defaults (and, for custom resources,
  pruning) are applied again and the object is validated as usual;
* validating webhooks are called concurrently; the first failure in webhook order is returned;
* calls present the sandbox's webhook client certificate (:mod:`gpucluster.sandbox.pki`) to a webhook that
  asks for one, as kube-apiserver with a ``kubeConfigFile`` whose ``*`` user carries it;
* calls are AdmissionReview v1 POSTs over HTTPS to ``clientConfig.url`` or to the service
  ``https://<name>.<namespace>.svc:<port><path>`` (resolved through :meth:`register_service`,
  else to a ready endpoint of the Service's EndpointSlices; verified against ``caBundle`` with
  that host name), with ``?timeout=<n>s`` and the webhook's ``timeoutSeconds`` (default 10);
* transport errors, timeouts, non-2xx answers and malformed responses follow ``failurePolicy``
  (``Fail``: 500 ``Internal error occurred: failed calling webhook "<name>": ...``); a denial is
  ``admission webhook "<name>" denied the request: <message>`` with the webhook's code (at least
  400); warnings go back to the client as ``Warning`` headers;
* dry-run requests are refused (400) by webhooks whose ``sideEffects`` is not None/NoneOnDryRun.

Requests for webhook configurations and admission policies themselves never call webhooks. The
configurations get upstream's defaults on write (failurePolicy Fail, matchPolicy Equivalent, empty
selectors, timeoutSeconds 10, reinvocationPolicy Never, rule scope ``*``, service port 443) and the
validation that matters for calling them (names, sideEffects, admissionReviewVersions, exactly one
of url/service, https URLs, timeouts 1-30 s, compilable matchConditions).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import copy
import json
import logging
import re
import socket
import ssl
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import aiohttp
import jsonpatch
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from gpucluster.sandbox.apiserver import errors
from gpucluster.sandbox.apiserver.core import NAMESPACES, ApiCore, Attributes
from gpucluster.sandbox.apiserver.errors import ApiError
from gpucluster.sandbox.apiserver.resources import ResourceType
from gpucluster.sandbox.apiserver.selectors import Selector, label_selector_from_object

Obj = dict[str, Any]
log = logging.getLogger("sandbox.webhooks")

GROUP = "admissionregistration.k8s.io"
MUTATING = (GROUP, "mutatingwebhookconfigurations")
VALIDATING = (GROUP, "validatingwebhookconfigurations")
EXEMPT_KINDS = frozenset(
    {
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
    }
)
# Subresources whose request body is another kind than the resource's.
SUBRESOURCE_KINDS = {
    "binding": ("", "v1", "Binding"),
    "eviction": ("policy", "v1", "Eviction"),
    "scale": ("autoscaling", "v1", "Scale"),
}
_SUFFIX = re.compile(r"^[bcdfghjklmnpqrstvwxz2456789]{5}$")
_SERVICE_HOST = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.svc(\.cluster\.local)?\.?$"
)
ServiceKey = tuple[str, str, int]  # (namespace, name, port)


class CallError(Exception):
    """The webhook could not be called or answered badly: ``failurePolicy`` decides (ErrCallingWebhook)."""

    def __init__(self, webhook: str, reason: str) -> None:
        super().__init__(f'failed calling webhook "{webhook}": {reason}')
        self.webhook = webhook
        self.reason = reason


# --------------------------------------------------------------------------- configurations


@dataclass(frozen=True)
class Webhook:
    """One webhook of a stored configuration, with upstream's defaults applied."""

    configuration: str
    index: int
    raw: Obj
    mutating: bool

    @property
    def name(self) -> str:
        return str(self.raw.get("name") or "")

    @property
    def uid(self) -> str:
        return f"{self.configuration}/{self.name}/{self.index}"

    @property
    def failure_policy(self) -> str:
        return str(self.raw.get("failurePolicy") or "Fail")

    @property
    def ignore_failures(self) -> bool:
        return self.failure_policy == "Ignore"

    @property
    def timeout(self) -> int:
        value = self.raw.get("timeoutSeconds")
        return int(value) if isinstance(value, int) and value > 0 else 10

    @property
    def reinvocable(self) -> bool:
        return self.mutating and self.raw.get("reinvocationPolicy") == "IfNeeded"

    @property
    def rules(self) -> list[Obj]:
        return [r for r in self.raw.get("rules") or [] if isinstance(r, dict)]

    @property
    def match_conditions(self) -> list[tuple[str, str]]:
        out = []
        for mc in self.raw.get("matchConditions") or []:
            if isinstance(mc, dict):
                out.append((str(mc.get("name") or ""), str(mc.get("expression") or "")))
        return out


def _selector(raw: Any) -> Selector:
    """A LabelSelector; malformed ones raise ApiError 500 like upstream's parse failure."""
    if raw is None or raw == {}:
        return ()
    if not isinstance(raw, dict):
        raise errors.internal("invalid label selector")
    try:
        parsed = label_selector_from_object(raw)
    except (KeyError, TypeError, AttributeError) as exc:
        raise errors.internal(f"invalid label selector: {exc}") from None
    return parsed or ()


def _labels_match(selector: Selector, labels: Any) -> bool:
    labels = labels if isinstance(labels, dict) else {}
    return all(r.matches(labels) for r in selector)


# --------------------------------------------------------------------------- request attributes


@dataclass
class Request:
    """What the webhooks of one admission pass see (built once per pass)."""

    attrs: Attributes
    resource: tuple[str, str, str]  # group, version, plural
    kind: tuple[str, str, str]  # group, version, kind
    subresource: str
    name: str
    namespace: str
    operation: str

    @property
    def user_info(self) -> Obj:
        user = self.attrs.user or {}
        out: Obj = {}
        if user.get("username"):
            out["username"] = user["username"]
        if user.get("uid"):
            out["uid"] = user["uid"]
        if user.get("groups"):
            out["groups"] = list(user["groups"])
        if user.get("extra"):
            out["extra"] = user["extra"]
        return out


def generated_name(obj: Obj | None) -> bool:
    """Whether a CREATE's name came from ``generateName`` (upstream sends an empty request name then)."""
    md = (obj or {}).get("metadata") or {}
    prefix, name = str(md.get("generateName") or ""), str(md.get("name") or "")
    return bool(prefix) and name.startswith(prefix) and bool(_SUFFIX.match(name[len(prefix) :]))


def build_request(attrs: Attributes, *, mutating: bool) -> Request:
    """The request as the mutating or the validating webhooks see it: on a generateName CREATE the
    mutating ones get no name (the name is generated after mutating admission), the validating ones
    the generated name (AdmissionToValidateObjectFunc takes it from the object)."""
    rt = attrs.resource
    kind = SUBRESOURCE_KINDS.get(attrs.subresource, (rt.group, rt.version, rt.kind))
    name = attrs.name
    generated = attrs.operation == "CREATE" and not attrs.subresource and generated_name(attrs.object)
    if mutating and generated:
        name = ""
    namespace = attrs.namespace
    if rt.key == NAMESPACES:  # a Namespace request is in that namespace (a generated one: in none)
        namespace = "" if generated else attrs.name
    return Request(attrs, (rt.group, rt.version, rt.plural), kind, attrs.subresource, name, namespace, attrs.operation)


def operation_options(attrs: Attributes) -> Obj | None:
    """``request.options``: the CreateOptions/UpdateOptions the request set (dryRun, fieldManager,
    fieldValidation) or its DeleteOptions (a Namespace's with the uid precondition its registry
    adds), always as meta.k8s.io/v1."""
    if not attrs.options:
        return None
    kind = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}.get(attrs.operation)
    options = {k: v for k, v in attrs.options.items() if k not in ("kind", "apiVersion")}
    if attrs.dry_run and not options.get("dryRun"):
        options["dryRun"] = ["All"]
    if attrs.operation == "DELETE" and attrs.resource.key == NAMESPACES and attrs.old_object is not None:
        # the namespace registry makes sure a deletion is of the namespace it read
        preconditions = dict(options.get("preconditions") or {})
        preconditions.setdefault("uid", attrs.old_object["metadata"].get("uid"))
        options["preconditions"] = preconditions
    return {"kind": kind or attrs.options.get("kind"), "apiVersion": "meta.k8s.io/v1", **options}


@dataclass(frozen=True)
class Invocation:
    webhook: Webhook
    resource: tuple[str, str, str]
    kind: tuple[str, str, str]

    def versioned(self, obj: Obj | None) -> Obj | None:
        """The object as the invocation's version sees it (no conversion: apiVersion only)."""
        if obj is None or self.kind[2] in ("Binding", "Eviction", "Scale"):
            return obj
        group, version = self.kind[0], self.kind[1]
        api_version = f"{group}/{version}" if group else version
        if obj.get("apiVersion") == api_version:
            return obj
        return {**obj, "apiVersion": api_version}


def _matches_any(items: Any, value: str) -> bool:
    return isinstance(items, list) and any(i == "*" or i == value for i in items)


def rule_matches(rule: Obj, req: Request, resource: tuple[str, str, str]) -> bool:
    """predicates/rules: scope, operation, group, version, resource[/subresource]."""
    scope = rule.get("scope") or "*"
    is_namespace = resource[0] == "" and resource[2] == "namespaces"
    if scope == "Namespaced" and (is_namespace or not req.namespace):
        return False
    if scope == "Cluster" and not (is_namespace or not req.namespace):
        return False
    if scope not in ("*", "Namespaced", "Cluster"):
        return False
    operations = rule.get("operations")
    if not _matches_any(operations, req.operation):
        return False
    if not _matches_any(rule.get("apiGroups"), resource[0]) or not _matches_any(rule.get("apiVersions"), resource[1]):
        return False
    for item in rule.get("resources") or []:
        res, _, sub = str(item).partition("/")
        if (res == "*" or res == resource[2]) and (sub == "*" or sub == req.subresource):
            return True
    return False


# --------------------------------------------------------------------------- CEL match conditions


@lru_cache(maxsize=256)
def _compile(expression: str) -> Any:
    import celpy

    env = celpy.Environment()
    return env.program(env.compile(expression))


def compile_error(expression: str) -> str | None:
    try:
        _compile(expression)
    except Exception as exc:  # celpy raises its own error types
        return str(exc)
    return None


def _cel(value: Any) -> Any:
    from celpy import json_to_cel  # type: ignore[attr-defined]

    return json_to_cel(value)


# --------------------------------------------------------------------------- HTTP client


class ServiceResolver(AbstractResolver):
    """Resolves ``<name>.<namespace>.svc`` to what :meth:`WebhookAdmission.register_service` said,
    else to a ready endpoint of the Service (its EndpointSlices, the port named like the Service's
    port); other host names go to the system resolver."""

    def __init__(self, services: dict[ServiceKey, tuple[str, int]], store: Any = None) -> None:
        self.services = services
        self.store = store
        self._fallback: AbstractResolver | None = None

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        m = _SERVICE_HOST.match(host)
        if m is not None:
            target = self.services.get((m.group(3), m.group(1), port))
            if target is None and self.store is not None:
                target = service_endpoint(self.store, m.group(3), m.group(1), port)
            if target is None:
                raise OSError(f"lookup {host}: no such host")
            fam = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
            return [
                {
                    "hostname": host,
                    "host": target[0],
                    "port": target[1],
                    "family": fam,
                    "proto": 0,
                    "flags": socket.AI_NUMERICHOST,
                }
            ]
        if self._fallback is None:
            self._fallback = aiohttp.ThreadedResolver()
        return await self._fallback.resolve(host, port, family)

    async def close(self) -> None:
        if self._fallback is not None:
            await self._fallback.close()


def service_endpoint(store: Any, namespace: str, name: str, port: int) -> tuple[str, int] | None:
    """A ready endpoint (pod IP, target port) of Service ``namespace/name`` for its ``port``, from the
    EndpointSlices labelled ``kubernetes.io/service-name``; None without one (as an unroutable
    ClusterIP would fail)."""
    service = store.get(("", "services"), namespace, name)
    if service is None:
        return None
    service_port = next((p for p in (service.get("spec") or {}).get("ports") or [] if p.get("port") == port), None)
    if service_port is None:
        return None
    port_name = str(service_port.get("name") or "")
    for s in store.iter(("discovery.k8s.io", "endpointslices"), namespace):
        if ((s.get("metadata") or {}).get("labels") or {}).get("kubernetes.io/service-name") != name:
            continue
        target = next((p.get("port") for p in s.get("ports") or [] if str(p.get("name") or "") == port_name), None)
        if target is None:
            continue
        for e in s.get("endpoints") or []:
            conditions = e.get("conditions") or {}
            if conditions.get("ready") is not False and not conditions.get("terminating") and e.get("addresses"):
                return str(e["addresses"][0]), int(target)
    return None


@lru_cache(maxsize=64)
def _ssl_context(ca_bundle: str, client: tuple[str, str] | None = None) -> ssl.SSLContext:
    """TLS client context trusting ``caBundle`` (base64 of PEM), or the system roots without one,
    presenting the ``client`` certificate and key files (when given) to a webhook that asks."""
    ctx = ssl.create_default_context()
    if ca_bundle:
        try:
            pem = base64.b64decode(ca_bundle, validate=True).decode()
            ctx = ssl.create_default_context(cadata=pem)
        except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError) as exc:
            raise ValueError(f"unable to load root certificates: {exc}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if client is not None:
        ctx.load_cert_chain(*client)
    return ctx


def _go_error(exc: BaseException, address: str, host: str) -> str:
    """The transport error as Go's net/http would word it."""
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):
        return "context deadline exceeded"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        cert_error = exc.certificate_error
        if getattr(cert_error, "verify_code", None) == 62:
            return f"tls: failed to verify certificate: x509: certificate is not valid for {host}"
        return "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"dial tcp: {exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, aiohttp.ClientSSLError):
        return f"remote error: tls: {exc.os_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        if isinstance(exc.os_error, ConnectionRefusedError):
            return f"dial tcp {address}: connect: connection refused"
        return f"dial tcp {address}: {exc.os_error.strerror or exc.os_error}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "EOF"
    return str(exc) or type(exc).__name__


# --------------------------------------------------------------------------- the plugin


@dataclass
class _Reinvocation:
    previously_invoked: set[str] = field(default_factory=set)
    reinvoke: set[str] = field(default_factory=set)
    should_reinvoke: bool = False

    def changed(self) -> None:
        self.reinvoke |= self.previously_invoked
        self.previously_invoked = set()
        self.should_reinvoke = True


class WebhookAdmission:
    """The webhook admission plugins of a sandbox; see the module docstring."""

    def __init__(self, core: ApiCore) -> None:
        self.core = core
        self.services: dict[ServiceKey, tuple[str, int]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._installed = False
        self.calls = 0  # webhook HTTP calls made (for tests and benchmarks)
        # The certificate and key files presented to every webhook (kube-apiserver's
        # AdmissionConfiguration kubeConfigFile with a "*" user entry); None: none.
        self.client_certificate: tuple[str, str] | None = None

    # ------------------------------------------------------------ wiring

    def install(self) -> None:
        if self._installed:
            return
        self.core.admission.mutating.insert(0, self._default_configuration)
        self.core.admission.mutating.append(self.mutate)
        self.core.admission.validating.insert(0, self._validate_configuration)
        self.core.admission.validating.append(self.validate)
        self._installed = True

    def uninstall(self) -> None:
        for hooks, fns in (
            (self.core.admission.mutating, (self._default_configuration, self.mutate)),
            (self.core.admission.validating, (self._validate_configuration, self.validate)),
        ):
            for fn in fns:
                if fn in hooks:
                    hooks.remove(fn)
        self._installed = False

    def register_service(self, namespace: str, name: str, port: int, target: str | tuple[str, int]) -> None:
        """Route the service ``name.namespace.svc:port`` (as webhook clientConfigs name it) to ``target``
        (``"127.0.0.1:9443"`` or ``("127.0.0.1", 9443)``)."""
        if isinstance(target, str):
            host, _, port_text = target.rpartition(":")
            target = (host.strip("[]"), int(port_text))
        self.services[(namespace, name, int(port))] = (target[0], int(target[1]))
        self._reset_session()

    def _reset_session(self) -> None:
        # Pooled connections are keyed by the URL's host, not the resolved address: start afresh.
        old, self._session = self._session, None
        if old is not None and not old.closed:
            with contextlib.suppress(RuntimeError):  # no loop: nothing to close with
                asyncio.get_running_loop().create_task(old.close())

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            resolver = ServiceResolver(self.services, self.core.store)
            connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False, limit=0)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # ------------------------------------------------------------ reading configurations

    def webhooks(self, resource: tuple[str, str]) -> list[Webhook]:
        out: list[Webhook] = []
        mutating = resource == MUTATING
        for config in self.core.store.iter(resource):  # sorted by name, like upstream's sort
            name = str(config["metadata"]["name"])
            for i, raw in enumerate(config.get("webhooks") or []):
                if isinstance(raw, dict):
                    out.append(Webhook(name, i, raw, mutating))
        return out

    @staticmethod
    def exempt(attrs: Attributes) -> bool:
        rt = attrs.resource
        return rt.group == GROUP and rt.kind in EXEMPT_KINDS

    # ------------------------------------------------------------ ShouldCallHook

    def _namespace_labels(self, req: Request, obj: Obj | None) -> Any:
        attrs = req.attrs
        if attrs.resource.key == NAMESPACES and not req.subresource and req.operation in ("CREATE", "UPDATE"):
            return ((obj or {}).get("metadata") or {}).get("labels")
        ns = self.core.store.get(NAMESPACES, "", req.namespace)
        if ns is None:
            raise errors.not_found("", "namespaces", req.namespace)
        return ns["metadata"].get("labels")

    def _equivalents(self, req: Request) -> Iterable[ResourceType]:
        rt = req.attrs.resource
        for other in self.core.registry:
            if other.group == rt.group and other.plural == rt.plural and other.version != rt.version:
                yield other

    def should_call(self, hook: Webhook, req: Request, obj: Obj | None, old: Obj | None) -> Invocation | None:
        ns_error: ApiError | None = None
        obj_error: ApiError | None = None
        # namespaceSelector
        try:
            is_namespace = req.attrs.resource.key == NAMESPACES
            if req.namespace or is_namespace:
                selector = _selector(hook.raw.get("namespaceSelector"))
                if selector and not _labels_match(selector, self._namespace_labels(req, obj)):
                    return None
        except ApiError as exc:
            ns_error = exc
        # objectSelector
        try:
            selector = _selector(hook.raw.get("objectSelector"))
            if selector:
                labels_of = [((o.get("metadata") or {}).get("labels")) for o in (obj, old) if o is not None]
                if not any(_labels_match(selector, labels) for labels in labels_of):
                    return None
        except ApiError as exc:
            obj_error = exc
        invocation: Invocation | None = None
        for rule in hook.rules:
            if rule_matches(rule, req, req.resource):
                invocation = Invocation(hook, req.resource, req.kind)
                break
        if invocation is None and (hook.raw.get("matchPolicy") or "Equivalent") == "Equivalent":
            for rule in hook.rules:
                for other in self._equivalents(req):
                    resource = (other.group, other.version, other.plural)
                    if rule_matches(rule, req, resource):
                        kind = SUBRESOURCE_KINDS.get(req.subresource, (other.group, other.version, other.kind))
                        invocation = Invocation(hook, resource, kind)
                        break
                if invocation is not None:
                    break
        if invocation is None:
            return None
        if ns_error is not None:
            raise ns_error
        if obj_error is not None:
            raise obj_error
        conditions = hook.match_conditions
        if conditions and not self._match_conditions(hook, invocation, req, obj, old):
            return None
        return invocation

    def _match_conditions(self, hook: Webhook, inv: Invocation, req: Request, obj: Obj | None, old: Obj | None) -> bool:
        request = self.review_request(req, inv, None, None, uid="")
        for key in ("uid", "object", "oldObject"):
            request.pop(key, None)
        activation = {
            "object": _cel(inv.versioned(obj)),
            "oldObject": _cel(inv.versioned(old)),
            "request": _cel(request),
        }
        failures: list[str] = []
        for name, expression in hook.match_conditions:
            try:
                result = _compile(expression).evaluate(activation)
                if isinstance(result, Exception):
                    raise result
            except Exception as exc:  # celpy's evaluation and compile errors
                failures.append(f"{name}: {exc}" if name else str(exc))
                continue
            if not bool(result):
                return False
        if failures:
            if hook.ignore_failures:
                return False
            rt = req.attrs.resource
            raise errors.forbidden(rt.group, rt.plural, req.name, "; ".join(failures))
        return True

    # ------------------------------------------------------------ AdmissionReview

    def review_request(self, req: Request, inv: Invocation, obj: Obj | None, old: Obj | None, *, uid: str) -> Obj:
        """An AdmissionRequest as ``CreateV1AdmissionReview`` fills it (omitempty fields left out)."""
        out: Obj = {
            "uid": uid,
            "kind": {"group": inv.kind[0], "version": inv.kind[1], "kind": inv.kind[2]},
            "resource": {"group": inv.resource[0], "version": inv.resource[1], "resource": inv.resource[2]},
        }
        if req.subresource:
            out["subResource"] = req.subresource
        out["requestKind"] = {"group": req.kind[0], "version": req.kind[1], "kind": req.kind[2]}
        out["requestResource"] = {"group": req.resource[0], "version": req.resource[1], "resource": req.resource[2]}
        if req.subresource:
            out["requestSubResource"] = req.subresource
        if req.name:
            out["name"] = req.name
        if req.namespace:
            out["namespace"] = req.namespace
        out["operation"] = req.operation
        out["userInfo"] = req.user_info
        out["object"] = inv.versioned(obj)
        out["oldObject"] = inv.versioned(old)
        out["dryRun"] = bool(req.attrs.dry_run)
        out["options"] = operation_options(req.attrs)
        return out

    def _url(self, hook: Webhook) -> tuple[str, str, str]:
        """(URL with ?timeout=, host for TLS, host:port for error messages)."""
        config = hook.raw.get("clientConfig") or {}
        if config.get("url"):
            url = str(config["url"])
            parsed = URL(url)
            host = parsed.host or ""
            address = f"{host}:{parsed.port}"
        elif isinstance(config.get("service"), dict):
            svc = config["service"]
            port = int(svc.get("port") or 443)
            host = f"{svc.get('name')}.{svc.get('namespace')}.svc"
            url = f"https://{host}:{port}{svc.get('path') or ''}"
            target = self.services.get((str(svc.get("namespace")), str(svc.get("name")), port))
            address = f"{target[0]}:{target[1]}" if target else f"{host}:{port}"
        else:
            raise CallError(hook.name, "could not get REST client: no url or service in clientConfig")
        url += ("&" if "?" in url else "?") + f"timeout={hook.timeout}s"
        return url, host, address

    async def call(self, hook: Webhook, inv: Invocation, req: Request, obj: Obj | None, old: Obj | None) -> Obj:
        """POST the review; returns the verified ``response``. Raises CallError (failurePolicy
        applies) or ApiError (dry run unsupported, always fatal)."""
        if req.attrs.dry_run:
            side_effects = hook.raw.get("sideEffects")
            if side_effects is None:
                raise CallError(hook.name, "Webhook SideEffects is nil")
            if side_effects not in ("None", "NoneOnDryRun"):
                raise errors.bad_request(f'admission webhook "{hook.name}" does not support dry run')
        versions = hook.raw.get("admissionReviewVersions") or []
        if "v1" not in versions:
            raise CallError(
                hook.name,
                "could not create admission objects: webhook does not accept known AdmissionReview versions (v1)",
            )
        uid = str(uuid.uuid4())
        review = {
            "kind": "AdmissionReview",
            "apiVersion": "admission.k8s.io/v1",
            "request": self.review_request(req, inv, obj, old, uid=uid),
        }
        url, host, address = self._url(hook)
        ca_bundle = str((hook.raw.get("clientConfig") or {}).get("caBundle") or "")
        try:
            context = _ssl_context(ca_bundle, self.client_certificate)
        except ValueError as exc:
            raise CallError(hook.name, f"could not get REST client: {exc}") from None
        body = json.dumps(review, separators=(",", ":")).encode()
        self.calls += 1
        try:
            async with asyncio.timeout(hook.timeout):
                async with self.session().post(
                    url,
                    data=body,
                    ssl=context,
                    headers={"Content-Type": "application/json", "Accept": "application/json, */*"},
                ) as resp:
                    status, raw = resp.status, await resp.read()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise CallError(
                hook.name, f'failed to call webhook: Post "{url}": {_go_error(exc, address, host)}'
            ) from None
        if not 200 <= status < 300:
            text = raw.decode(errors="replace").strip()
            detail = (
                self._status_message(raw)
                or f'an error on the server ("{text[:200]}") has prevented the request from succeeding'
            )
            raise CallError(hook.name, f"failed to call webhook: {detail}")
        try:
            answer = json.loads(raw)
        except ValueError as exc:
            raise CallError(hook.name, f"failed to call webhook: json parse error: {exc}") from None
        return self._verify(hook, answer, uid)

    @staticmethod
    def _status_message(raw: bytes) -> str:
        try:
            body = json.loads(raw)
        except ValueError:
            return ""
        if isinstance(body, dict) and body.get("kind") == "Status" and body.get("message"):
            return str(body["message"])
        return ""

    @staticmethod
    def _verify(hook: Webhook, answer: Any, uid: str) -> Obj:
        """``VerifyAdmissionResponse`` for AdmissionReview v1."""

        def bad(why: str) -> CallError:
            return CallError(hook.name, f"received invalid webhook response: {why}")

        if not isinstance(answer, dict) or not isinstance(answer.get("response"), dict):
            raise bad("webhook response was absent")
        response: Obj = answer["response"]
        if response.get("uid") != uid:
            raise bad(f'expected response.uid="{uid}", got "{response.get("uid", "")}"')
        if answer.get("apiVersion") != "admission.k8s.io/v1" or answer.get("kind") != "AdmissionReview":
            got = f"{answer.get('apiVersion', '')}, Kind={answer.get('kind', '')}"
            raise bad(f"expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {got}")
        patch, patch_type = response.get("patch"), response.get("patchType")
        if hook.mutating:
            if patch and patch_type is None:
                raise bad("webhook returned response.patch but not response.patchType")
            if not patch and patch_type is not None:
                raise bad("webhook returned response.patchType but not response.patch")
            if patch_type is not None and not patch_type:
                raise bad(f'webhook returned invalid response.patchType of "{patch_type}"')
        else:
            if patch:
                raise bad("validating webhook may not return response.patch")
            if patch_type is not None:
                raise bad("validating webhook may not return response.patchType")
        return response

    @staticmethod
    def denial(hook: Webhook, response: Obj, warnings: list[str] | None = None) -> ApiError:
        """``ToStatusErr``: the webhook's Status with the ``admission webhook "<name>" denied`` message."""
        result: Obj = response["status"] if isinstance(response.get("status"), dict) else {}
        raw_code = result.get("code")
        code = raw_code if isinstance(raw_code, int) and raw_code >= 400 else 400
        denied_by = f'admission webhook "{hook.name}" denied the request'
        if result.get("message"):
            message = f"{denied_by}: {result['message']}"
        elif result.get("reason"):
            message = f"{denied_by}: {result['reason']}"
        else:
            message = f"{denied_by} without explanation"
        details = result.get("details") if isinstance(result.get("details"), dict) else None
        err = ApiError(code, str(result.get("reason") or ""), message, details=details)
        err.warnings = list(warnings or [])
        return err

    def _warn(self, req: Request, response: Obj) -> None:
        for warning in response.get("warnings") or []:
            text = " ".join(str(warning).split())
            if text and text not in req.attrs.warnings:
                req.attrs.warnings.append(text)

    # ------------------------------------------------------------ mutating

    async def mutate(self, attrs: Attributes) -> None:
        if self.exempt(attrs):
            return
        hooks = self.webhooks(MUTATING)
        if not hooks:
            return
        req = build_request(attrs, mutating=True)
        original = attrs.object
        obj, hidden = _before_create(attrs, req)
        old = attrs.old_object
        state = _Reinvocation()
        changed_any = False
        for round_ in (0, 1):
            if round_ == 1 and not state.should_reinvoke:
                break
            for hook in hooks:
                invocation = self.should_call(hook, req, obj, old)
                if invocation is None:
                    continue
                if round_ == 1 and hook.uid not in state.reinvoke:
                    continue
                error: CallError | None = None
                changed = False
                try:
                    obj, changed = await self._mutate_one(hook, invocation, req, obj, old)
                except CallError as exc:
                    error = exc
                if changed:
                    changed_any = True
                    state.changed()
                if hook.reinvocable:
                    state.previously_invoked.add(hook.uid)
                if error is not None:
                    if hook.ignore_failures:
                        log.warning("failed calling webhook, failing open webhook=%s error=%s", hook.name, error)
                        continue
                    log.warning("failed calling webhook, failing closed webhook=%s error=%s", hook.name, error)
                    raise errors.internal(str(error))
        if changed_any and obj is not None and original is not None:
            attrs.object = self._after_mutation(attrs, original, obj, hidden)

    async def _mutate_one(
        self, hook: Webhook, inv: Invocation, req: Request, obj: Obj | None, old: Obj | None
    ) -> tuple[Obj | None, bool]:
        response = await self.call(hook, inv, req, obj, old)
        self._warn(req, response)
        if not response.get("allowed"):
            raise self.denial(hook, response, req.attrs.warnings)
        patch = response.get("patch")
        if not patch:
            return obj, False
        if response.get("patchType") != "JSONPatch":
            raise CallError(hook.name, f'unsupported patch type "{response.get("patchType")}"')
        try:
            ops = json.loads(base64.b64decode(str(patch), validate=True))
            if not isinstance(ops, list):
                raise ValueError("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        except (binascii.Error, ValueError) as exc:
            raise CallError(hook.name, f"received undecodable patch in webhook response: {exc}") from None
        if not ops:
            return obj, False
        if obj is None:
            raise errors.internal(
                f'admission webhook "{hook.name}" attempted to modify the object, which is not supported for this operation'
            )
        target = inv.versioned(obj)
        assert target is not None
        try:
            patched = jsonpatch.JsonPatch(ops).apply(copy.deepcopy(target))
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, KeyError, TypeError, IndexError) as exc:
            raise errors.internal(str(exc)) from None
        if not isinstance(patched, dict):
            raise errors.internal("the patched object is not a JSON object")
        patched["apiVersion"], patched["kind"] = obj.get("apiVersion"), obj.get("kind")
        return patched, patched != obj

    def _after_mutation(self, attrs: Attributes, original: Obj, obj: Obj, hidden: Obj) -> Obj:
        """Put back what the API server owns, then default (and prune) again like upstream does
        after a patch."""
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            raise errors.bad_request("metadata must be an object")
        omd = original.get("metadata") or {}
        md.update(hidden)
        if attrs.resource.namespaced:
            md["namespace"] = omd.get("namespace")
        if "managedFields" in omd:
            md["managedFields"] = omd["managedFields"]
        if attrs.operation == "UPDATE" and omd.get("resourceVersion"):
            md["resourceVersion"] = omd["resourceVersion"]
        defaults = getattr(self.core, "_defaults", None)
        if defaults is not None:
            obj = defaults(attrs.resource, obj, attrs.old_object, None)
        return obj

    # ------------------------------------------------------------ validating

    async def validate(self, attrs: Attributes) -> None:
        if self.exempt(attrs):
            return
        hooks = self.webhooks(VALIDATING)
        if not hooks:
            return
        req = build_request(attrs, mutating=False)
        obj, old = attrs.object, attrs.old_object
        invocations = [inv for hook in hooks if (inv := self.should_call(hook, req, obj, old)) is not None]
        if not invocations:
            return
        results = await asyncio.gather(
            *(self._validate_one(inv, req, obj, old) for inv in invocations), return_exceptions=True
        )
        for inv, result in zip(invocations, results, strict=True):
            if result is None:
                continue
            if isinstance(result, CallError):
                if inv.webhook.ignore_failures:
                    log.warning("failed calling webhook, failing open webhook=%s error=%s", inv.webhook.name, result)
                    continue
                log.warning("failed calling webhook, failing closed webhook=%s error=%s", inv.webhook.name, result)
                raise errors.internal(str(result))
            if isinstance(result, ApiError):
                raise result
            if isinstance(result, BaseException):
                if inv.webhook.ignore_failures:
                    continue
                raise errors.internal(f"ValidatingAdmissionWebhook/{inv.webhook.name} has panicked: {result}")

    async def _validate_one(self, inv: Invocation, req: Request, obj: Obj | None, old: Obj | None) -> None:
        response = await self.call(inv.webhook, inv, req, obj, old)
        self._warn(req, response)
        if not response.get("allowed"):
            raise self.denial(inv.webhook, response, req.attrs.warnings)

    # ------------------------------------------------------------ the configurations themselves

    async def _default_configuration(self, attrs: Attributes) -> None:
        rt = attrs.resource
        if rt.group != GROUP or rt.plural not in (MUTATING[1], VALIDATING[1]) or attrs.object is None:
            return
        if attrs.subresource:
            return
        obj = attrs.object
        for hook in obj.get("webhooks") or []:
            if isinstance(hook, dict):
                default_webhook(hook, mutating=rt.plural == MUTATING[1])

    async def _validate_configuration(self, attrs: Attributes) -> None:
        rt = attrs.resource
        if rt.group != GROUP or rt.plural not in (MUTATING[1], VALIDATING[1]) or attrs.object is None:
            return
        causes = configuration_causes(attrs.object, mutating=rt.plural == MUTATING[1])
        if causes:
            raise errors.invalid(rt.group, rt.kind, attrs.name, causes)


def _before_create(attrs: Attributes, req: Request) -> tuple[Obj | None, Obj]:
    """On CREATE, mutating webhooks see the object before the API server fills in uid,
    creationTimestamp, generation and a generated name; returns (view, the hidden fields)."""
    obj = attrs.object
    if attrs.operation != "CREATE" or obj is None or attrs.subresource:
        return obj, {}
    md = dict(obj.get("metadata") or {})
    hidden: Obj = {}
    for key in ("uid", "creationTimestamp", "generation"):
        if key in md:
            hidden[key] = md.pop(key)
    if not req.name and generated_name(obj):
        hidden["name"] = md.pop("name")
    return {**obj, "metadata": md}, hidden


def default_webhook(hook: Obj, *, mutating: bool) -> None:
    """admissionregistration/v1 defaults (SetDefaults_ValidatingWebhook / _MutatingWebhook)."""
    hook.setdefault("failurePolicy", "Fail")
    hook.setdefault("matchPolicy", "Equivalent")
    hook.setdefault("namespaceSelector", {})
    hook.setdefault("objectSelector", {})
    hook.setdefault("timeoutSeconds", 10)
    if mutating:
        hook.setdefault("reinvocationPolicy", "Never")
    for rule in hook.get("rules") or []:
        if isinstance(rule, dict):
            rule.setdefault("scope", "*")
    service = (hook.get("clientConfig") or {}).get("service")
    if isinstance(service, dict):
        service.setdefault("port", 443)


_QUALIFIED = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?){2,}$")


def configuration_causes(obj: Obj, *, mutating: bool) -> list[tuple[str, str, str]]:
    """The subset of upstream's webhook configuration validation that calling them depends on."""
    causes: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    for i, hook in enumerate(obj.get("webhooks") or []):
        path = f"webhooks[{i}]"
        if not isinstance(hook, dict):
            causes.append(("FieldValueInvalid", path, "Invalid value: must be an object"))
            continue
        name = str(hook.get("name") or "")
        if not name:
            causes.append(("FieldValueRequired", f"{path}.name", "Required value"))
        elif not _QUALIFIED.match(name):
            causes.append(
                (
                    "FieldValueInvalid",
                    f"{path}.name",
                    f'Invalid value: "{name}": should be a domain with at least three segments separated by dots',
                )
            )
        elif name in seen:
            causes.append(("FieldValueDuplicate", f"{path}.name", f'Duplicate value: "{name}"'))
        seen.add(name)
        side_effects = hook.get("sideEffects")
        if side_effects is None:
            causes.append(
                ("FieldValueRequired", f"{path}.sideEffects", "Required value: must specify one of None, NoneOnDryRun")
            )
        elif side_effects not in ("None", "NoneOnDryRun"):
            causes.append(
                (
                    "FieldValueNotSupported",
                    f"{path}.sideEffects",
                    f'Unsupported value: "{side_effects}": supported values: "None", "NoneOnDryRun"',
                )
            )
        versions = hook.get("admissionReviewVersions")
        if not versions:
            causes.append(
                (
                    "FieldValueRequired",
                    f"{path}.admissionReviewVersions",
                    "Required value: must specify one of v1, v1beta1",
                )
            )
        elif not any(v in ("v1", "v1beta1") for v in versions):
            causes.append(
                (
                    "FieldValueInvalid",
                    f"{path}.admissionReviewVersions",
                    f"Invalid value: {json.dumps(versions)}: must include at least one of v1, v1beta1",
                )
            )
        policy = hook.get("failurePolicy")
        if policy is not None and policy not in ("Fail", "Ignore"):
            causes.append(
                (
                    "FieldValueNotSupported",
                    f"{path}.failurePolicy",
                    f'Unsupported value: "{policy}": supported values: "Fail", "Ignore"',
                )
            )
        timeout = hook.get("timeoutSeconds")
        if timeout is not None and (not isinstance(timeout, int) or not 1 <= timeout <= 30):
            causes.append(
                (
                    "FieldValueInvalid",
                    f"{path}.timeoutSeconds",
                    f"Invalid value: {timeout}: the timeout value must be between 1 and 30 seconds",
                )
            )
        config: Obj = hook["clientConfig"] if isinstance(hook.get("clientConfig"), dict) else {}
        has_url, has_service = bool(config.get("url")), bool(config.get("service"))
        if has_url == has_service:
            causes.append(
                (
                    "FieldValueRequired",
                    f"{path}.clientConfig",
                    "Required value: exactly one of url or service is required",
                )
            )
        elif has_url and not str(config["url"]).startswith("https://"):
            causes.append(
                (
                    "FieldValueInvalid",
                    f"{path}.clientConfig.url",
                    f"Invalid value: \"{config['url']}\": 'https' is the only allowed URL scheme",
                )
            )
        for j, mc in enumerate(hook.get("matchConditions") or []):
            expression = str((mc or {}).get("expression") or "") if isinstance(mc, dict) else ""
            problem = compile_error(expression) if expression else "Required value"
            if problem:
                causes.append(
                    (
                        "FieldValueInvalid",
                        f"{path}.matchConditions[{j}].expression",
                        f'Invalid value: "{expression}": compilation failed: {problem}',
                    )
                )
        if mutating and hook.get("reinvocationPolicy") not in (None, "Never", "IfNeeded"):
            causes.append(
                (
                    "FieldValueNotSupported",
                    f"{path}.reinvocationPolicy",
                    f'Unsupported value: "{hook.get("reinvocationPolicy")}": supported values: "IfNeeded", "Never"',
                )
            )
    return causes
