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

One pydantic model serves the job loader and ``SimEnv`` alike (no second dataclass).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from schemas.transition import FORMATS


class SimSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str = Field(min_length=1)
    base_url: str | None = None  # None: load ``model`` locally with transformers
    api_key_env: str | None = None
    tokenizer: str | None = None  # for the history budget at an endpoint (default: the model's own when local)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(512, ge=1)
    retries: int = Field(2, ge=0)
    retry_temperature: float = Field(0.7, gt=0.0)
    max_prompt_tokens: int = Field(4096, ge=64)  # the SFT samples' history budget
    format: str | None = None  # the predicted observations' format (default: the domain's usual one)
    reset: Literal["real", "recorded"] = "real"
    recorded: str | None = None  # a store path, for reset: recorded
    timeout_s: float = Field(120.0, gt=0)

    @model_validator(mode="after")
    def _check(self) -> SimSection:
        if self.format is not None and self.format not in FORMATS:
            raise ValueError(f"format: unknown format {self.format!r} (known: {', '.join(sorted(FORMATS))})")
        if self.reset == "recorded" and not self.recorded:
            raise ValueError("reset: recorded needs recorded: <store path>")
        return self

    def sampling(self) -> dict[str, Any]:
        """What a simulated transition records about how it was sampled."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_new_tokens": self.max_new_tokens,
                "retries": self.retries, "retry_temperature": self.retry_temperature,
                "max_prompt_tokens": self.max_prompt_tokens}  # fmt: skip
