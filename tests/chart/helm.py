"""Real Helm v4 for the chart tests (helm-python-sdk: Helm's Go SDK behind ctypes, no helm binary).

``render`` is ``helm template`` with capabilities (``--api-versions``, ``--kube-version``) through
the native ``helm_render`` call, whose options JSON carries them (the Python wrapper's
``Chart.render`` does not expose them). Helm itself merges the chart's defaults, validates the
values against values.schema.json and runs the templates; ``--set`` flags go through Helm's own
``strvals`` parser. ``lint`` is ``helm lint``. The documented installs are ``Recipe`` constants.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml
from helm_python import _native

from gpucluster.certs.authority import new_ca

CHART_DIR = Path(__file__).resolve().parents[2] / "charts" / "gpucluster"

KUBE_VERSION = "v1.34.2"
# What .Capabilities.APIVersions.Has checks, as a real cluster serves it: group/version and
# group/version/kind. Helm adds these to its built-in list (like --api-versions).
DEVICE_CLASS_API = ("resource.k8s.io/v1", "resource.k8s.io/v1/DeviceClass")
NVIDIADRIVER_API = ("nvidia.com/v1alpha1", "nvidia.com/v1alpha1/NVIDIADriver")
CERT_MANAGER_API = ("cert-manager.io/v1", "cert-manager.io/v1/Certificate", "cert-manager.io/v1/Issuer")
SERVICE_MONITOR_API = ("monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor")
DEFAULT_API_VERSIONS: tuple[str, ...] = DEVICE_CLASS_API

NAMESPACE = "gpu-operator"
# A CA certificate as the chart's caBundle values take it (base64 of the PEM).
CA_BUNDLE = base64.b64encode(new_ca("chart-test-ca").cert_pem).decode()
RELEASE = "gpu-operator"

Values = dict[str, Any]
# Severity of a lint message (Helm's support.Severity).
INFO, WARNING, ERROR = 1, 2, 3


class Manifest(dict[str, Any]):
    """One rendered Kubernetes object, with the chart template it came from."""

    def __init__(self, obj: dict[str, Any], template: str) -> None:
        super().__init__(obj)
        self.template = template

    @property
    def kind(self) -> str:
        return str(self.get("kind", ""))

    @property
    def name(self) -> str:
        return str((self.get("metadata") or {}).get("name", ""))

    @property
    def hook(self) -> str | None:
        """The helm.sh/hook annotation (pre-delete, ...), None for a release object."""
        annotations = (self.get("metadata") or {}).get("annotations") or {}
        value = annotations.get("helm.sh/hook")
        return None if value is None else str(value)


@dataclass(frozen=True)
class Recipe:
    """A documented ``helm upgrade --install``: its --set flags and what the cluster must serve."""

    name: str
    set_flags: tuple[str, ...]
    api_versions: tuple[str, ...] = field(default=DEFAULT_API_VERSIONS)

    def with_flags(self, *flags: str, api_versions: tuple[str, ...] = ()) -> Recipe:
        return Recipe(self.name, self.set_flags + flags, self.api_versions + api_versions)


_DRA_DEFAULT = ("operator.env[0].name=DEFAULT_GPU_ALLOCATION_MODE", "operator.env[0].value=dra")
# README "Install on a cluster" and the header of charts/gpucluster/values.yaml.
DOCS_OPERATOR_MANAGED = Recipe(
    "operator-managed",
    ("gpuCluster.enabled=true", "driver.nvidiaDriverCRD.enabled=true", *_DRA_DEFAULT),
    DEVICE_CLASS_API + NVIDIADRIVER_API,
)
DOCS_PREINSTALLED = Recipe("pre-installed", ("gpuCluster.enabled=true", "driver.enabled=false", *_DRA_DEFAULT))
DOCS_RECIPES = (DOCS_OPERATOR_MANAGED, DOCS_PREINSTALLED)


@cache
def chart() -> helm.Chart:
    """The chart, loaded once per process (handles are immutable and thread-safe)."""
    return helm.Chart.load(CHART_DIR)


def set_values(set_flags: list[str] | tuple[str, ...]) -> Values:
    """Values of ``--set`` flags, parsed by Helm's strvals (each --set parses into the same map, in
    order, exactly as one comma-joined expression does)."""
    return helm.parse_set_string(",".join(set_flags)) if set_flags else {}


def _values(values: list[str] | tuple[str, ...] | Values) -> Values:
    return dict(values) if isinstance(values, dict) else set_values(values)


def render_text(
    values: list[str] | tuple[str, ...] | Values = (),
    *,
    api_versions: tuple[str, ...] | list[str] = DEFAULT_API_VERSIONS,
    kube_version: str = KUBE_VERSION,
    namespace: str = NAMESPACE,
    release: str = RELEASE,
    is_upgrade: bool = False,
) -> dict[str, str]:
    """Template path -> rendered text (NOTES.txt included), as Helm's engine returns it.

    ``values``: a list of ``--set`` flags or a values dict (user values; Helm adds the defaults).
    Raises helm.HelmValuesError (schema) or helm.HelmRenderError (a template's ``fail``)."""
    opts = {
        "name": release,
        "namespace": namespace,
        "api_versions": list(api_versions),
        "kube_version": kube_version,
        "is_install": not is_upgrade,
        "is_upgrade": is_upgrade,
    }
    out = _native.call_string("helm_render", chart()._raw(), json.dumps(_values(values)), json.dumps(opts))
    rendered: dict[str, str] = json.loads(out)
    return rendered


def render(
    values: list[str] | tuple[str, ...] | Values = (),
    *,
    api_versions: tuple[str, ...] | list[str] = DEFAULT_API_VERSIONS,
    kube_version: str = KUBE_VERSION,
    namespace: str = NAMESPACE,
    release: str = RELEASE,
    is_upgrade: bool = False,
) -> list[Manifest]:
    """Every rendered object (hooks included, CRDs of crds/ not: see ``crds``), in template order."""
    texts = render_text(
        values,
        api_versions=api_versions,
        kube_version=kube_version,
        namespace=namespace,
        release=release,
        is_upgrade=is_upgrade,
    )
    out = []
    for template, text in sorted(texts.items()):
        if not template.endswith((".yaml", ".yml", ".json")):
            continue  # NOTES.txt, like Helm
        for doc in yaml.safe_load_all(text):
            if doc:
                out.append(Manifest(doc, template.split("/", 1)[1]))
    return out


def default_objects(manifests: list[Manifest]) -> list[Manifest]:
    """The GPUCluster and NVIDIADriver the install creates: rendered as release objects, or carried
    as YAML in a ConfigMap labelled app.kubernetes.io/component=defaults (applied by a hook Job).
    A carried object's ``template`` is ``<ConfigMap template>#<data key>``."""
    out = []
    for manifest in manifests:
        if manifest.kind in ("GPUCluster", "NVIDIADriver"):
            out.append(manifest)
        labels = (manifest.get("metadata") or {}).get("labels") or {}
        if manifest.kind == "ConfigMap" and labels.get("app.kubernetes.io/component") == "defaults":
            for key, text in sorted((manifest.get("data") or {}).items()):
                out += [Manifest(d, f"{manifest.template}#{key}") for d in yaml.safe_load_all(text) if d]
    return out


def render_recipe(
    recipe: Recipe, *extra_flags: str, api_versions: tuple[str, ...] = (), is_upgrade: bool = False
) -> list[Manifest]:
    """``render`` of a documented install, optionally with more --set flags and served APIs."""
    return render(
        recipe.set_flags + extra_flags, api_versions=recipe.api_versions + api_versions, is_upgrade=is_upgrade
    )


def render_error(
    values: list[str] | tuple[str, ...] | Values = (),
    *,
    api_versions: tuple[str, ...] | list[str] = DEFAULT_API_VERSIONS,
    kube_version: str = KUBE_VERSION,
    namespace: str = NAMESPACE,
    release: str = RELEASE,
    is_upgrade: bool = False,
) -> str:
    """The message Helm fails with (a template's ``fail``, a schema violation); AssertionError when
    the render succeeds."""
    try:
        render_text(
            values,
            api_versions=api_versions,
            kube_version=kube_version,
            namespace=namespace,
            release=release,
            is_upgrade=is_upgrade,
        )
    except (helm.HelmRenderError, helm.HelmValuesError, helm.HelmChartInvalidError) as exc:
        return str(exc)
    raise AssertionError(f"rendering succeeded with {values!r}")


@dataclass(frozen=True)
class LintMessage:
    severity: int
    path: str
    error: str

    def __str__(self) -> str:
        return f"[{('UNKNOWN', 'INFO', 'WARNING', 'ERROR')[self.severity]}] {self.path}: {self.error}"


def lint(values: list[str] | tuple[str, ...] | Values = (), *, kube_version: str = KUBE_VERSION) -> list[LintMessage]:
    """``helm lint --kube-version`` with these values: all its messages (info included).

    Helm lints templates in lint mode, where ``fail`` only logs: the install-time checks are
    tested through ``render_error``."""
    report = helm.lint(CHART_DIR, _values(values), namespace=NAMESPACE, kube_version=kube_version)
    messages = [LintMessage(int(m["severity"]), str(m["path"]), str(m["error"])) for m in report["messages"]]
    messages += [LintMessage(ERROR, "", str(e)) for e in report.get("errors") or []]
    return messages


def crds() -> list[dict[str, Any]]:
    """The CustomResourceDefinitions of crds/, as Helm installs them (before any template)."""
    out = []
    for crd in chart().crds:
        out += [d for d in yaml.safe_load_all(crd["data"]) if d]
    return out
