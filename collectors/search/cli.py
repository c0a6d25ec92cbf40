"""``trajforge search``: build a search index and generate a task suite from a corpus.

trajforge search build-index                       # the builtin pydoc corpus, into the cache
trajforge search build-index --corpus docs.jsonl --index-dir idx/
trajforge search make-tasks examples/tasks/search.yaml -n 8
"""

from __future__ import annotations

from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True, help="Search environment: build an index, generate tasks.")


def _docs(corpus: str | None):
    from collectors.search.corpus import load_corpus, pydoc_corpus

    return (load_corpus(corpus), corpus) if corpus else (pydoc_corpus(), "pydoc")


@app.command("build-index")
def build_index(
    corpus: Annotated[
        str | None, typer.Option(help="JSONL or Parquet of {id, url, title, text} (default: builtin pydoc).")
    ] = None,
    index_dir: Annotated[str | None, typer.Option(help="Where the index goes (default: <cache>/search/<env-id>).")] = None,
    env_id: Annotated[str, typer.Option(help="The env_id tasks will use for this corpus.")] = "pydoc",
    force: Annotated[bool, typer.Option(help="Rebuild even when the index holds this corpus version.")] = False,
) -> None:
    """Index a corpus (BM25, tantivy); a current index is kept unless --force."""
    from collectors.search.env import default_index_dir
    from collectors.search.index import SearchIndex

    docs, source = _docs(corpus)
    path = index_dir or default_index_dir(env_id)
    index = (SearchIndex.build if force else SearchIndex.ensure)(docs, path, source=source)
    m = index.meta
    typer.echo(f"index {m['version']}: {m['documents']} documents from {source} at {index.path}")
    typer.echo(f"built {m['built_at']} in {m['build_seconds']} s; ranking {m['ranking']}")


@app.command("make-tasks")
def make_tasks(
    out: Annotated[str, typer.Argument(help="The task suite YAML to write.")],
    n: Annotated[int, typer.Option("-n", min=1, help="How many tasks (half of each kind).")] = 8,
    seed: Annotated[int, typer.Option(help="Which tasks: same seed, same suite.")] = 0,
    corpus: Annotated[str | None, typer.Option(help="A pydoc-style JSONL or Parquet corpus (default: builtin pydoc).")] = None,
    env_id: Annotated[str, typer.Option(help="The env_id written into each task.")] = "pydoc",
) -> None:
    """Generate questions with answers checkable against the corpus, with scripted solutions."""
    from collectors.search.tasks import make_tasks as generate
    from collectors.search.tasks import write_suite

    docs, source = _docs(corpus)
    tasks = generate(docs, n=n, seed=seed, env_id=env_id)
    header = (
        f"Search tasks generated from the {source} corpus (trajforge search make-tasks {out} -n {n} --seed {seed}).\n"
        "Each is answered by one document (extra.source_doc); `actions` is a scripted solution."
    )
    path = write_suite(tasks, out, header)
    typer.echo(f"wrote {len(tasks)} tasks to {path}")
