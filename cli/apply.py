"""``gpucluster apply -f FILE|DIR``: server-side apply objects once the admission webhook answers.

The chart's post-install/post-upgrade hook runs it to create the default GPUCluster (and
NVIDIADriver). Helm creates all of a release's objects in one pass, custom resources after the
webhook configurations, so a custom resource created by Helm itself reaches its own fail-closed
webhook before any webhook pod is ready (and, with self-managed certificates, before the caBundle
is injected). This command waits for that instead: a refusal that means "the webhook cannot be
called yet" is retried until ``--timeout``; any other refusal (the webhook denied the object, the
object is invalid, RBAC) fails at once with the API server's message. An object that already
exists and is not ours (see :func:`applied_by_us`) is left alone, and that is an error.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpucluster.cli import Subparsers, options
from gpucluster.errors import EXIT_OK, InputError

# Messages kube-apiserver gives when a webhook could not be called (dispatcher errors), as
# opposed to a webhook that answered with a denial.
_UNREACHABLE_WEBHOOK = ("failed calling webhook", "no endpoints available", "connection refused", "x509:")


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "apply",
        help="server-side apply objects, waiting until their admission webhooks can be called",
        description=(
            "Server-side apply the objects of FILE (or of every .yaml/.yml/.json file in DIR, in name order). "
            "While the API server cannot call an admission webhook yet (the webhook's pods are starting, its "
            "caBundle is not injected) or is unavailable, retry until --timeout; any other refusal fails at once. "
            "The chart's install and upgrade hook uses it to create the default GPUCluster."
        ),
    )
    parser.add_argument("-f", "--filename", required=True, metavar="FILE|DIR", help="manifests (YAML or JSON)")
    parser.add_argument("--field-manager", default="gpucluster-chart", help="server-side apply field manager")
    parser.add_argument("--timeout", type=options.finite, default=300.0, help="seconds to keep retrying (default 300)")
    options.add_kubeconfig(parser)
    parser.set_defaults(func=run)


def manifest_files(path: str) -> list[str]:
    """FILE itself, or DIR's manifest files in name order (ConfigMap mounts add dot-entries: skipped)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(
            str(f) for f in p.iterdir() if f.suffix in (".yaml", ".yml", ".json") and not f.name.startswith(".")
        )
        if not files:
            raise InputError(f"{path}: no .yaml, .yml or .json files")
        return files
    if not p.exists():
        raise InputError(f"{path}: no such file or directory")
    return [path]


def retryable(status: int, body: Mapping[str, Any]) -> bool:
    """Whether a refusal means 'try again shortly' rather than 'this object is refused'."""
    message = str(body.get("message") or "")
    if status in (429, 502, 503, 504):
        return True
    if status == 500 and any(marker in message for marker in _UNREACHABLE_WEBHOOK):
        return True
    return status == 500 and str(body.get("reason") or "") in ("InternalError", "ServiceUnavailable", "Timeout")


INSTANCE_LABEL = "app.kubernetes.io/instance"


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("metadata") or {}).get("labels") or {}


def applied_by_us(live: Mapping[str, Any], desired: Mapping[str, Any], field_manager: str) -> bool:
    """Whether an existing object may be applied over: we applied it before (our field manager
    holds fields of it), or it carries the manifest's ``app.kubernetes.io/instance`` label (the
    release it belongs to). Anything else is someone else's, and is never overwritten or adopted."""
    managers = {str(entry.get("manager")) for entry in (live.get("metadata") or {}).get("managedFields") or []}
    if field_manager in managers:
        return True
    instance = _labels(desired).get(INSTANCE_LABEL)
    return bool(instance) and _labels(live).get(INSTANCE_LABEL) == instance


async def _get(kube: Any, path: str) -> dict[str, Any] | None:
    from gpucluster.kube.client import KubeError

    try:
        found: dict[str, Any] = await kube.get(path)
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise
    return found


def display_name(obj: Mapping[str, Any]) -> str:
    from gpucluster.kube.paths import plural

    api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
    resource, _ = plural(api_version, kind)
    group = api_version.split("/")[0] if "/" in api_version else ""
    name = str((obj.get("metadata") or {}).get("name") or "")
    return f"{resource}.{group}/{name}" if group else f"{resource}/{name}"


async def _apply_all(objects: list[dict[str, Any]], args: argparse.Namespace) -> None:
    from gpucluster.kube.client import Kube, KubeError
    from gpucluster.kube.paths import UnknownKind, object_path

    kube = await Kube.connect(args.kubeconfig)
    try:
        deadline = time.monotonic() + args.timeout
        for obj in objects:
            try:
                path = object_path(obj)
            except UnknownKind as exc:
                raise InputError(str(exc)) from None
            delay = 1.0
            while True:
                try:
                    live = await _get(kube, path)
                    if live is not None and not applied_by_us(live, obj, args.field_manager):
                        instance = _labels(obj).get(INSTANCE_LABEL) or "<release>"
                        raise InputError(
                            f"{display_name(obj)} already exists and is not this release's (never applied by "
                            f"{args.field_manager}, no {INSTANCE_LABEL}={instance} label): left unchanged; delete it, "
                            "or hand it over by adding that label"
                        )
                    await kube.request(
                        "PATCH", path, body=obj, content_type="application/apply-patch+yaml",
                        query=[("fieldManager", args.field_manager), ("force", "true")],
                    )  # fmt: skip
                    print(f"{display_name(obj)} serverside-applied", flush=True)
                    break
                except KubeError as exc:
                    if not retryable(exc.status, exc.body) or time.monotonic() + delay > deadline:
                        raise InputError(f"{display_name(obj)}: {exc}") from None
                    print(f"{display_name(obj)}: not yet ({exc.status}: {exc.body.get('message', '')}); retrying",
                          file=sys.stderr, flush=True)  # fmt: skip
                except (OSError, TimeoutError) as exc:
                    if time.monotonic() + delay > deadline:
                        raise InputError(f"{display_name(obj)}: the API server is unreachable: {exc}") from None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
    finally:
        await kube.close()


def run(args: argparse.Namespace) -> int:
    from gpucluster.manifests import load_objects

    objects: list[dict[str, Any]] = []
    for file in manifest_files(args.filename):
        objects.extend(load_objects(file))
    if not objects:
        raise InputError(f"{args.filename}: no objects found")
    if args.timeout <= 0:
        raise InputError(f"--timeout must be positive, not {args.timeout:g}")
    asyncio.run(_apply_all(objects, args))
    return EXIT_OK
