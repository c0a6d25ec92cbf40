"""A release version is written once: the built folder is put in place whole, a version
that exists is kept when the new build is byte-identical and refused otherwise, and a
rerun from unchanged inputs (the same ``input_hash``) answers from the release there
without building.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from pipelines.release.manifest import open_release
from pipelines.release.stats import ReleaseReport
from pipelines.store import Store
from pipelines.store.layout import MANIFEST, Layout
from pipelines.store.publish import publish_tree
from schemas.errors import StoreError, TrajforgeError


def unchanged_release(store: Store, final: str, key: str, report: ReleaseReport) -> ReleaseReport | None:
    """The report of the release at ``final`` when it was built from exactly these inputs
    (its manifest's ``input_hash`` is ``key`` and its folder holds the listed files), else None."""
    if not store.sfs.exists(Layout.manifest(final)):
        return None
    try:
        manifest = open_release(store.sfs.uri(final)).manifest
    except TrajforgeError:
        return None  # damaged: build, and let the comparison of manifests decide
    extra = manifest.model_extra or {}
    if extra.get("input_hash") != key:
        return None
    for f in manifest.files:
        if f.stage and f.split:
            report.count(f.stage, f.split, f.rows or 0, f.tokens or 0)
    plan = extra.get("plan") or {}
    report.shortfall = {st: p["shortfall"] for st, p in plan.items() if isinstance(p, dict) and p.get("shortfall")}
    report.dropped = extra.get("dropped_for_length") or {}
    report.lengths = extra.get("lengths") or {}
    report.input_hash, report.identical = key, True
    return report


def _content(manifest: bytes) -> Any:
    """A manifest without its ``input_hash``: inputs that changed without changing the content
    (a reformatted report, another library version) give the same release."""
    try:
        body = json.loads(manifest)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return manifest
    if isinstance(body, dict):
        body.pop("input_hash", None)
    return body


def put_in_place(store: Store, tmp: Path, final: str, report: ReleaseReport) -> ReleaseReport:
    """Move the built release to its final place with ``publish_tree``: a rename on local
    disk; on an object store every file uploaded as one object, ``manifest.json`` last (a
    release exists once its manifest does: a kill mid-upload leaves no release, and the
    rerun clears what it left and uploads it again). A version that exists is kept if
    identical, refused otherwise."""
    sfs = store.sfs
    if sfs.exists(final if sfs.local else Layout.manifest(final)):
        return _kept_if_identical(store, tmp, final, report)
    if not publish_tree(sfs, tmp, final, clear=True):  # another build put this version in place meanwhile
        return _kept_if_identical(store, tmp, final, report)
    return report


def _kept_if_identical(store: Store, tmp: Path, final: str, report: ReleaseReport) -> ReleaseReport:
    """The version at ``final`` exists: keep it when its manifest says the same as the
    build's in ``tmp`` (then dropped), refuse otherwise."""
    sfs = store.sfs
    old = Layout.manifest(final)
    same = sfs.exists(old) and _content(sfs.read_bytes(old)) == _content((tmp / MANIFEST).read_bytes())
    shutil.rmtree(tmp)
    if not same:
        raise StoreError(
            f"{sfs.uri(final)}: release {report.name} {report.version} exists with other content: "
            "releases are immutable, give this one a new version"
        )
    report.identical = True
    return report
