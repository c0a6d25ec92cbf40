"""The local runner (``--runner DirectRunner`` and the default): Beam's FnApiRunner pinned, so a
pipeline never tries Prism (a binary Beam's DirectRunner downloads and runs, leaving a
``beam-temp*`` folder behind where the download fails), in both of the local modes, with
the pipeline's counters."""

from __future__ import annotations

import tempfile

import pytest

from pipelines.beam_options import beam_options


@pytest.mark.parametrize("extra", [[], ["--runner=DirectRunner", "--direct_running_mode=in_memory"]])
def test_direct_runner_is_the_pinned_fn_api_runner(tmp_path, monkeypatch, extra):
    import apache_beam as beam
    from apache_beam.metrics import Metrics
    from apache_beam.metrics.metric import MetricsFilter
    from apache_beam.runners.portability import prism_runner
    from apache_beam.testing.util import assert_that, equal_to

    from pipelines.beam_local import LocalRunner

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    tried = []
    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", lambda *a, **k: tried.append(a))
    counted = Metrics.counter("test", "seen")

    def seen(x):
        counted.inc()
        return 2 * x

    options = beam_options(extra)
    p = beam.Pipeline(options=options)
    assert_that(p | beam.Create([1, 2, 3]) | beam.Map(seen), equal_to([2, 4, 6]))
    result = p.run()
    result.wait_until_finish()
    assert isinstance(p.runner, LocalRunner) and not tried
    assert not list(tmp_path.glob("beam-temp*"))
    (count,) = result.metrics().query(MetricsFilter().with_name("seen"))["counters"]
    assert count.committed == 3
