"""The ``sim`` section of a collection job: which world model plays the environment, and how.

    backend: sim                      # top level of the job: every domain is simulated
    sim:
      model: runs/sft/final           # a local model folder (transformers), or the model name at base_url
      base_url: http://127.0.0.1:8000/v1   # any OpenAI-compatible endpoint (vLLM, SGLang, trajforge sim serve)
      temperature: 0.0                # sampling parameters, recorded in every transition's provenance
      max_new_tokens: 512
      retries: 2                      # a malformed prediction is asked again this many times,
      retry_temperature: 0.7          # at this temperature, then the step is a simulation error
      reset: real                     # the initial observation: the real task's reset, or `recorded`
      recorded: ../store              # (reset: recorded) a store whose trajectories of the task give it

One pydantic model serves the job loader and ``SimEnv`` alike (no second dataclass). It is
defined with the job file (``collectors.jobs``), below simulate, so that collectors can
check a job without importing simulate; it is named here for simulate's own modules.
"""

from __future__ import annotations

from collectors.jobs import SimSection

__all__ = ["SimSection"]
