"""Curation: raw shards -> curated shards (validate, normalise, dedupe, filter, scrub,
decontaminate). The logic is plain functions over records (``pipelines.curate.logic``);
Beam only wires them (``pipelines.curate.beam``)."""
