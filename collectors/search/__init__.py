"""The search domain: a local search engine (tantivy, BM25) over a document corpus, as a
search agent's environment. ``env`` is the environment, ``index`` builds and queries the
on-disk index, ``corpus`` loads documents (the builtin Python documentation or a user's
JSONL/Parquet file), ``tasks`` generates checkable questions and scores answers."""
