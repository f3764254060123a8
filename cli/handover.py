"""``gpucluster handover``: keep a release's objects through an upgrade that drops them from its manifest.

Chart 0.1.0 created the default NVIDIADriver (and GPUCluster) as release objects; later charts
apply them through a hook. Upgrading would make Helm delete the old release objects once the new
manifest is applied, and deleting the NVIDIADriver removes the GPU driver from every node. Helm
skips the deletion of an object whose live copy carries ``helm.sh/resource-policy: keep``, so the
chart's pre-upgrade hook runs this command to add that annotation, and the post-upgrade hook then
takes the object over in place (same UID, no operand restarted).

Only objects that Helm's own annotations name as this release's are touched.
"""

from __future__ import annotations

import argparse

from gpucluster.cli import Subparsers, options
from gpucluster.cli.cleanup import GPUCLUSTERS, NVIDIADRIVERS, against_cluster
from gpucluster.errors import EXIT_OK, InputError

KEEP = "helm.sh/resource-policy"
RESOURCES = {"gpuclusters.nvidia.com": GPUCLUSTERS, "nvidiadrivers.nvidia.com": NVIDIADRIVERS}


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "handover",
        help="mark a Helm release's objects helm.sh/resource-policy=keep before an upgrade drops them",
        description=(
            "Annotate each RESOURCE/NAME (gpuclusters.nvidia.com or nvidiadrivers.nvidia.com) that Helm's "
            "meta.helm.sh annotations name as --release's with helm.sh/resource-policy=keep, so that an upgrade "
            "whose manifest no longer contains it leaves it in place. The chart's pre-upgrade hook runs it."
        ),
    )
    parser.add_argument("objects", nargs="+", metavar="RESOURCE/NAME")
    parser.add_argument("--release", required=True, help="the Helm release")
    parser.add_argument("--release-namespace", required=True, help="the Helm release's namespace")
    options.add_kubeconfig(parser)
    parser.set_defaults(func=run)


def parse_object(text: str) -> str:
    """The object's API path from ``resource.group/name``."""
    resource, _, name = text.partition("/")
    if resource not in RESOURCES or not name or "/" in name:
        raise InputError(f"{text}: expected gpuclusters.nvidia.com/NAME or nvidiadrivers.nvidia.com/NAME")
    return f"{RESOURCES[resource]}/{name}"


async def _handover(paths: list[tuple[str, str]], args: argparse.Namespace) -> None:
    from gpucluster.kube.client import Kube, KubeError

    kube = await Kube.connect(args.kubeconfig)
    try:
        for text, path in paths:
            try:
                live = await kube.get(path)
            except KubeError as exc:
                if exc.status == 404:
                    print(f"{text}: not found, nothing to keep", flush=True)
                    continue
                raise InputError(f"{text}: {exc}") from None
            meta = live.get("metadata") or {}
            annotations = meta.get("annotations") or {}
            owner = (annotations.get("meta.helm.sh/release-name"), annotations.get("meta.helm.sh/release-namespace"))
            if owner != (args.release, args.release_namespace):
                print(f"{text}: not an object of release {args.release_namespace}/{args.release}: left alone")
                continue
            if annotations.get(KEEP) == "keep":
                print(f"{text}: already kept", flush=True)
                continue
            body = {"metadata": {"resourceVersion": meta.get("resourceVersion"), "annotations": {KEEP: "keep"}}}
            try:
                await kube.request("PATCH", path, body=body, content_type="application/merge-patch+json")
            except KubeError as exc:
                raise InputError(f"{text}: {exc}") from None
            print(f"{text} annotated {KEEP}=keep: the upgrade leaves it in place", flush=True)
    finally:
        await kube.close()


def run(args: argparse.Namespace) -> int:
    paths = [(text, parse_object(text)) for text in args.objects]
    against_cluster(_handover(paths, args))
    return EXIT_OK
