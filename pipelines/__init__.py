"""Curation, mixtures, releases and queries over a trajforge store."""
