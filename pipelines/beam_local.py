"""Beam's local runner, pinned: ``--runner DirectRunner`` (and the local default) runs
curation, releases and Beam-mode collection on Beam's ``FnApiRunner``, with the pipeline's
options handed to its workers as Beam's DirectRunner hands them.

Since Beam 2.68 the DirectRunner first tries Prism, a Go binary it downloads from GitHub
at run time and runs (apache/beam#34612). Online, every pipeline would then run on a
runner fetched that moment (another program than the one tested here, which ignores
``--direct_running_mode`` and names its metrics otherwise, so curation's counts would be
lost). Offline, the download fails after a network try, and the job server's temporary
folder (``beam-temp*`` in the system's temporary folder) is left behind, one a pipeline.
Beam's maintainers advise pinning the ``FnApiRunner`` (the DirectRunner's own choice when
Prism is not used). A user who wants Prism names ``--runner PrismRunner``.

Example::

    beam.Pipeline(options=PipelineOptions(["--runner=pipelines.beam_local.LocalRunner"]))
"""

from __future__ import annotations

from apache_beam.portability.api import beam_provision_api_pb2
from apache_beam.runners.portability.fn_api_runner import fn_runner
from apache_beam.runners.portability.portable_runner import JobServiceHandle


class LocalRunner(fn_runner.FnApiRunner):
    """The ``FnApiRunner`` as Beam's DirectRunner starts it (its workers get the options)."""

    def run_pipeline(self, pipeline, options):
        encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
        self._provision_info = fn_runner.ExtendedProvisionInfo(beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded))
        return super().run_pipeline(pipeline, options)
