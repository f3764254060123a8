"""Operand image fields: the reference grammar the renderer builds images with, and the rules a
GPUCluster's ``repository``/``image``/``version`` must follow for the renderer to build one.

The grammar is github.com/distribution/reference's (no IPv6 hosts): a first component is a
registry host only if it has a dot or a port or is ``localhost``; path components are lowercase.
``gpucluster.controller.operands.common.resolve_image`` uses these expressions; the model and the CRD refuse,
from the spec alone, what it would refuse: a repository without image and version (or an image and
version without a repository), a repository, image or version it could not parse. What depends on
the operator's environment (a version alone rolls the operator's default image) stays with the
renderer.
"""

from __future__ import annotations

from typing import Any

_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
DOMAIN = rf"{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?"
PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
# A first component that is not a host: a path component without dots.
_FIRST_PATH = r"[a-z0-9]+(?:(?:_|__|-+)[a-z0-9]+)*"
_HOST = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})+(?::[0-9]+)?|{_DOMAIN_PART}:[0-9]+|localhost)"
TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
SHA256 = r"sha256:[0-9a-f]{64}"
DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"

# ``repository``: a registry and path (nvcr.io/nvidia), or a bare registry host.
REPOSITORY = rf"^(?:{_HOST}(?:/{PATH_COMPONENT})*|{_FIRST_PATH}(?:/{PATH_COMPONENT})*)$"
# ``image`` next to a repository: one lowercase path component.
IMAGE_NAME = rf"^{PATH_COMPONENT}$"
# ``image`` alone: a full reference, name[:tag][@digest].
REFERENCE = rf"^(?:{_HOST}/{PATH_COMPONENT}(?:/{PATH_COMPONENT})*|{_FIRST_PATH}(?:/{PATH_COMPONENT})*)(?::{TAG})?(?:@{DIGEST})?$"
# ``version``: a tag, or a sha256 digest (joined with '@').
VERSION = rf"^(?:{TAG}|{SHA256})$"

MAX_REFERENCE = 1024
REPOSITORY_MESSAGE = "must be a registry and repository such as nvcr.io/nvidia (lowercase path, no trailing slash)"
IMAGE_NAME_MESSAGE = "must be a lowercase image name such as dcgm-exporter"
REFERENCE_MESSAGE = "must be a full image reference such as nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1 (lowercase path)"
VERSION_MESSAGE = "must be an image tag (letters, digits, _ . -; at most 128) or a sha256: digest"
ALL_THREE_MESSAGE = "repository, image and version must all be set (or image alone as a full reference, or none)"


def _set(var: str) -> str:
    return f"(has(self.{var}) && self.{var} != '')"


def image_rules() -> list[dict[str, Any]]:
    """The CRD rules of an operand's image fields (patterns on repository and version carry the rest)."""
    return [
        {
            "rule": f"!{_set('repository')} || {_set('image')}",
            "message": ALL_THREE_MESSAGE,
            "fieldPath": ".image",
            "reason": "FieldValueRequired",
        },
        {
            "rule": f"!{_set('repository')} || !{_set('image')} || {_set('version')}",
            "message": ALL_THREE_MESSAGE,
            "fieldPath": ".version",
            "reason": "FieldValueRequired",
        },
        {
            "rule": f"!({_set('image')} && {_set('version')}) || {_set('repository')}",
            "message": ALL_THREE_MESSAGE,
            "fieldPath": ".repository",
            "reason": "FieldValueRequired",
        },
        {
            "rule": f"!{_set('image')} || !({_set('repository')} || {_set('version')}) || "
            f"self.image.matches(r'{IMAGE_NAME}')",
            "message": IMAGE_NAME_MESSAGE,
            "fieldPath": ".image",
        },
        {
            "rule": f"!{_set('image')} || {_set('repository')} || {_set('version')} || self.image.matches(r'{REFERENCE}')",
            "message": REFERENCE_MESSAGE,
            "fieldPath": ".image",
        },
    ]


def image_problem(repository: str | None, image: str | None, version: str | None) -> str | None:
    """What the renderer would refuse in these fields whatever the operator's environment, as
    ``<field>: <message>``; None when it can build an image from them (or from the environment)."""
    import re

    if repository and not image:
        return f"image: Required value: {ALL_THREE_MESSAGE}"
    if repository and not version:
        return f"version: Required value: {ALL_THREE_MESSAGE}"
    if image and version and not repository:
        return f"repository: Required value: {ALL_THREE_MESSAGE}"
    if repository and not re.match(REPOSITORY, repository):
        return f'repository: Invalid value: "{repository}": {REPOSITORY_MESSAGE}'
    if version and not re.match(VERSION, version):
        return f'version: Invalid value: "{version}": {VERSION_MESSAGE}'
    if image and (repository or version) and not re.match(IMAGE_NAME, image):
        return f'image: Invalid value: "{image}": {IMAGE_NAME_MESSAGE}'
    if image and not (repository or version) and not re.match(REFERENCE, image):
        return f'image: Invalid value: "{image}": {REFERENCE_MESSAGE}'
    return None
