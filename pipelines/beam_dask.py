"""Beam's ``DaskRunner``, with what trajforge's pipelines need of it and Beam's (2.77) lacks.

``--runner DaskRunner`` runs curation, releases and Beam-mode collection on a Dask cluster
(``--dask_client_address HOST:PORT``; without it, a local cluster) through this subclass.
Beam's own runner (``apache_beam.runners.dask.dask_runner.DaskRunner``) translates a
pipeline to Dask bags, and three of its gaps break these pipelines:

- **Tagged outputs.** A ``ParDo(...).with_outputs(...)`` writes every output into one bag,
  keyed by the transform, so a consumer of one output reads all of them. Here each output
  (main or tagged) is its own bag, filtered from the transform's.
- **Branches.** Only the last transform's bag is computed, so a branch that does not end
  there never runs. Here every leaf bag is computed.
- **Side inputs.** Each bundle computes its side inputs again inside its task, as a graph
  of its own whose keys clash with the pipeline's (Dask warns "different run_spec"). Here
  they are the task's dependencies, the very tasks of the pipeline's graph (not an
  optimised copy), computed once by the scheduler: a side input and the main path that
  share a bundle see the same output of it.
- **Grouping.** ``GroupByKey`` is a bag ``groupby`` on Python's ``hash``, which differs
  between worker processes for strings (each has its own hash seed) and, on Python 3.11,
  for None (a global combine's key: hashed by address), so a key's values can
  land in two groups. Here keys are partitioned by a stable digest and grouped by equality.

Metrics are not collected (Beam's Dask result raises on ``metrics()``): callers that count
with them treat the counts as unknown.
"""

from __future__ import annotations

import hashlib
import numbers
import pickle
from typing import Any

from apache_beam import pvalue
from apache_beam.runners.dask import dask_runner as _dr
from apache_beam.runners.dask import transform_evaluator as _te
from apache_beam.runners.dask.overrides import _GroupByKeyOnly
from apache_beam.transforms.sideinputs import SideInputMap

_MASK = (1 << 64) - 1


def _digest(key: Any) -> int:
    """A hash of ``key`` that every process agrees on and that keeps Python's equality: the
    hash of a str (or of what holds one) is seeded per process, and None's is its address
    (a global combine's key); numbers' hashes are not, and equal numbers of other types
    (``numpy.int64(3)``, ``3``) hash alike."""
    if isinstance(key, str):
        key = key.encode()
    if isinstance(key, bytes):
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big")
    if key is None:  # Python 3.11 hashes None by its address: another in every process
        return 0
    if isinstance(key, numbers.Number):
        return hash(key) & _MASK
    if isinstance(key, tuple):
        h = 0x345678
        for k in key:
            h = ((h ^ _digest(k)) * 1000003) & _MASK
        return h ^ len(key)
    if isinstance(key, frozenset):
        return sum(_digest(k) for k in key) & _MASK
    return int.from_bytes(hashlib.blake2b(pickle.dumps(key, protocol=4), digest_size=8).digest(), "big")


def _group(item: tuple[int, list]) -> list[tuple[Any, list]]:
    groups: dict[Any, list] = {}
    for elm in item[1]:
        k, v = elm
        groups.setdefault(k, []).append(_te.defenestrate(v))
    return list(groups.items())


class _GroupByKey(_te.GroupByKey):
    def apply(self, input_bag, side_inputs=None):
        return input_bag.groupby(lambda item: _digest(item[0])).map(_group).flatten()


def _windowed(values: list, window_fn) -> list:
    return [_te.get_windowed_value(v, window_fn) for v in values]


def _dofn_bundle(items, fn, window_fn, invoker_kwargs, sides, *side_values):
    """Beam's ``apply_dofn_to_bundle`` with receivers of its own (a worker may run bundles
    side by side), keeping each tagged output's tag (Beam's drops it) and the outputs of
    ``finish_bundle`` (Beam's takes them before). Side inputs come in as values the
    scheduler computed for this task (Beam's compute them again inside the task, a graph of
    their own whose shared keys clash with the pipeline's)."""
    receivers = _te.OneReceiver()
    handler = _te._OutputHandler(
        window_fn=window_fn,
        main_receivers=receivers[None],
        tagged_receivers=receivers,
        per_element_output_counter=None,
        output_batch_converter=None,
        process_yields_batches=False,
        process_batch_yields_elements=False,
    )
    side_inputs = [
        SideInputMap(kind, opts, _windowed(vals, fn_)) for (kind, opts, fn_), vals in zip(sides, side_values, strict=True)
    ]
    invoker = _te.DoFnInvoker.create_invoker(_te.DoFnSignature(fn), handler, side_inputs=side_inputs, **invoker_kwargs)
    invoker.invoke_setup()
    invoker.invoke_start_bundle()
    for it in items:
        invoker.invoke_process(it)
    invoker.invoke_finish_bundle()
    invoker.invoke_teardown()
    return [
        pvalue.TaggedOutput(v.tag, v.value.value) if isinstance(v, pvalue.TaggedOutput) else v.value for v in receivers.values
    ]


def _concat(*parts: list) -> list:
    return [x for part in parts for x in part]


class _ParDo(_te.ParDo):
    def apply(self, input_bag, side_inputs=None):
        """``side_inputs``: (kind, view options, window mapping, bag) of each side input."""
        import dask

        transform = self.transform
        args, kwargs = transform.raw_side_inputs
        main_input = next(iter(self.applied.main_inputs.values()))
        window_fn = main_input.windowing.windowfn if hasattr(main_input, "windowing") else None
        invoker_kwargs = dict(
            context=_te.DoFnContext(transform.label, state=None),
            input_args=list(args),
            input_kwargs=kwargs,
            user_state_context=None,
            bundle_finalizer_param=_te.DoFn.BundleFinalizerParam(),
        )
        sides = [(kind, opts, fn) for kind, opts, fn, _ in side_inputs or []]
        # unoptimised: the side input's tasks keep their keys, so the scheduler runs each once
        # for the side input and the pipeline alike (optimised apart, they are renamed copies
        # that compute the same bundles a second time, and a bundle whose output is not
        # deterministic, such as one batched by timings, then differs between its two uses)
        values = [dask.delayed(_concat)(*bag.to_delayed(optimize_graph=False)) for *_, bag in side_inputs or []]
        return input_bag.map(_te.get_windowed_value, window_fn).map_partitions(
            _dofn_bundle, transform.fn, window_fn, invoker_kwargs, sides, *values
        )


def _of_tag(tag: str | None):
    def pick(items):
        out = []
        for it in items:
            if isinstance(it, pvalue.TaggedOutput):
                if it.tag == tag:
                    out.append(it.value)
            elif tag is None:
                out.append(it)
        return out

    return pick


TRANSLATIONS = {**_te.TRANSLATIONS, _GroupByKeyOnly: _GroupByKey, _te.apache_beam.ParDo: _ParDo}


class _Result(_dr.DaskRunnerResult):
    def wait_until_finish(self, duration=None) -> str:
        try:
            return super().wait_until_finish(duration)
        finally:
            self.client.close()  # the run's own connection to the scheduler


class DaskRunner(_dr.DaskRunner):
    """Beam's DaskRunner, with one bag per output, every branch computed and stable grouping."""

    @staticmethod
    def to_dask_bag_visitor(bag_kwargs=None):
        bag_kwargs = bag_kwargs or {}

        class Visitor(_dr.PipelineVisitor):
            def __init__(self) -> None:
                self.outputs: dict[tuple[Any, str | None], Any] = {}  # (transform, tag): its bag
                self.consumed: set[int] = set()

            def bag_of(self, pcoll):
                """The bag of ``pcoll``: its producer's, or the part of it with its tag."""
                producer = pcoll.producer
                whole = self.outputs.get((producer, "*"))
                if whole is None:
                    return None
                self.consumed.add(id(whole))
                if len(producer.outputs) <= 1:
                    return whole
                key = (producer, pcoll.tag)
                if key not in self.outputs:
                    self.outputs[key] = whole.map_partitions(_of_tag(pcoll.tag))
                return self.outputs[key]

            def visit_transform(self, node) -> None:
                op_class = TRANSLATIONS.get(node.transform.__class__, _te.NoOp)
                op = op_class(node, bag_kwargs=bag_kwargs)
                kws: dict[str, Any] = {"input_bag": None, "side_inputs": None}
                inputs = [i for i in node.inputs if not isinstance(i, pvalue.PBegin)]
                bags = [b for b in (self.bag_of(i) for i in inputs) if b is not None]
                if bags:
                    kws["input_bag"] = bags[0] if len(bags) == 1 and not isinstance(op, _te.Flatten) else bags
                if node.side_inputs:  # materialised by the scheduler, as dependencies of each bundle
                    kws["side_inputs"] = [
                        (type(si), si._view_options(), si._window_mapping_fn, self.bag_of(si.pvalue)) for si in node.side_inputs
                    ]
                self.outputs[(node, "*")] = op.apply(**kws)

            def leaves(self) -> list:
                return [b for (_, tag), b in self.outputs.items() if tag == "*" and id(b) not in self.consumed]

        return Visitor()

    def run_pipeline(self, pipeline, options):
        import dask.distributed as ddist

        dask_options = options.view_as(_dr.DaskOptions).get_all_options(drop_default=True, current_only=True)
        bag_kwargs = _dr.DaskOptions._extract_bag_kwargs(dask_options)
        client = ddist.Client(**dask_options)
        pipeline.replace_all(_dr.dask_overrides())
        visitor = self.to_dask_bag_visitor(bag_kwargs)
        pipeline.visit(visitor)
        futures = client.compute(visitor.leaves())  # optimised as one graph: shared parts fuse alike
        return _Result(client, futures)


__all__ = ["DaskRunner"]
