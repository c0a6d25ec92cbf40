"""The near-duplicate stage on plain documents (benchmarks, and anyone deduplicating texts
outside a store): ``neardup``'s functions in this process, or ``beam.NearDuplicates``."""

from __future__ import annotations

from collections.abc import Sequence

from pipelines.curate import neardup
from pipelines.curate.config import NearDedup


def dedup_documents(
    docs: Sequence[tuple[str, str]],
    nd: NearDedup | None = None,
    *,
    domain: str = "web",
    runner: str = "auto",
    beam_args: list[str] | None = None,
) -> dict[str, tuple[str, float]]:
    """The stage on plain documents (id, text), in keep-priority order (an earlier one is
    kept over its later copies): ``{dropped id: (kept partner id, exact Jaccard)}``.
    ``runner``: ``local`` (this process), ``beam`` (``beam.NearDuplicates`` on Beam's
    runner, ``beam_args`` or in-process multi-process), ``auto`` (local up to ``neardup.LOCAL_MAX``)."""
    nd = nd or NearDedup()
    if runner not in ("auto", "local", "beam"):
        raise ValueError(f"runner must be auto, local or beam, got {runner!r}")
    if runner == "local" or (runner == "auto" and len(docs) <= neardup.LOCAL_MAX):
        verdicts = neardup.near_duplicates(neardup.document_nodes(docs, nd, domain=domain), nd)
    else:
        from pipelines.curate.beam import near_duplicates_on_beam

        verdicts = near_duplicates_on_beam(docs, nd, domain, beam_args)
    return {v.key[2]: (v.partner[2], v.similarity) for v in verdicts}
