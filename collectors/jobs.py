"""Collection job files: YAML checked completely before anything starts.

    job_id: terminal-swe            # stable: reruns resume this job
    seed: 0
    tasks: [../tasks/terminal.yaml] # task suites (YAML or JSONL), relative to this file
    domains: [terminal, swe]        # optional filter
    policy: {kind: scripted}        # scripted | exploration | openai (model, base_url, ...)
    episodes_per_task: 1
    max_steps: 20
    step_timeout_s: 30
    episode_timeout_s: 300
    workers: 2                      # processes; 0 runs inline
    concurrency: 1                  # episodes in flight per worker (LLM policies: 32 or more)
    max_starting: 4                 # sandboxes starting at once per worker (default: 2 per core)
    domain_concurrency: {web: 8}    # per-domain caps on episodes in flight
    start_timeout_s: 120            # one sandbox start, counted once it is admitted
    shutdown_grace_s: 30            # after SIGINT/SIGTERM, for the episodes in flight
    price: {prompt_per_mtok: 0.15, completion_per_mtok: 0.6}  # the model's price: the job's cost
    retries: 2                      # infrastructure failures per episode
    sandbox: {backend: local, memory_mb: 512}
    web: {allowed_origins: [], screenshot: false}  # web episodes only
    mcp: {call_timeout_s: 30, servers: {mine: {command: my-server, args: [--db, "{workspace}/x.db"]}}}
    search: {corpus: docs.jsonl}    # search episodes with env_id other than pydoc
    os: {screen: [1280, 800], screenshot: false}  # desktop episodes only
    android: {serials: [emulator-5554, emulator-5556]}  # worker i uses serials[i % n]; or {simulator: true}
    backend: sim                    # optional: a world model plays every environment (simulate)
    sim: {model: runs/sft/final, temperature: 0.0}  # which model and how it samples (SimSection)

A domain's section is that domain's options model (``schemas.domains``: ``web`` is
``collectors.web.env.WebOptions``), so the job file and the environment take the same
settings. Unknown keys, wrong types, missing task files and unknown domains are refused
with the file, the key and what was expected.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from collectors.env import EnvOptions, Task, load_suite
from sandboxes.base import SandboxConfig
from schemas.config import StrictConfig, load_yaml_model
from schemas.domains import DOMAINS
from schemas.domains import domain as domain_spec
from schemas.errors import ConfigError
from schemas.transition import FORMATS


class SandboxSection(BaseModel):
    model_config = ConfigDict(extra="forbid")
    backend: Literal["docker", "local", "auto"] = "auto"
    image: str | None = None
    network: bool = False
    memory_mb: int = Field(1024, ge=16)
    cpus: float = Field(1.0, gt=0)
    pids: int = Field(256, ge=8)
    disk_mb: int = Field(2048, ge=1)  # the sandbox's own file system: /work and /tmp together
    output_cap_bytes: int = Field(1 << 20, ge=1024)
    env: dict[str, str] = Field(default_factory=dict)


class PolicySection(StrictConfig):
    kind: Literal["scripted", "exploration", "openai"] = "scripted"
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    temperature: float | None = None
    max_steps: int | None = None
    max_tokens: int | None = Field(None, ge=1)
    retries: int | None = Field(None, ge=0)  # model calls: tries after the first (429, 5xx, resets)
    timeout_s: float | None = Field(None, gt=0)  # one model call
    history: dict[str, Any] | None = None  # the view the model is sent: {view: all | last | tokens | summary, ...}
    overlap_start: bool | None = None  # the first call while the sandbox starts (default: terminal)
    max_connections: int | None = Field(None, ge=1)


class PriceSection(StrictConfig):
    """What the policy's model costs, per million tokens (any currency): the job's cost."""

    prompt_per_mtok: float = Field(ge=0)
    completion_per_mtok: float = Field(ge=0)

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.prompt_per_mtok + completion_tokens * self.completion_per_mtok) / 1e6


class SimSection(BaseModel):
    """The ``sim`` section: which world model plays the environments, and how (``simulate``).

    One pydantic model serves the job loader and ``simulate.env.SimEnv`` alike; it lives
    here, with the job file, because collectors load job files and simulate sits above them.
    """

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
        keys = ("temperature", "top_p", "max_new_tokens", "retries", "retry_temperature", "max_prompt_tokens")
        return {k: getattr(self, k) for k in keys}


def _details(exc: ValidationError, *key: str) -> list[InitErrorDetails]:
    """A model's errors, to raise again as the job's (a section's under its key)."""
    return [
        {"type": PydanticCustomError(e["type"], "{msg}", {"msg": e["msg"]}), "loc": (*key, *e["loc"]), "input": e["input"]}
        for e in exc.errors()
    ]


class JobConfig(StrictConfig):
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)  # extra keys: only the domains' sections, checked below

    job_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    seed: int = 0
    tasks: list[str] = Field(min_length=1)
    domains: list[str] | None = Field(None, min_length=1)  # None: every domain of the tasks
    policy: PolicySection = PolicySection()
    episodes_per_task: int = Field(1, ge=1)
    max_steps: int = Field(20, ge=1)
    step_timeout_s: float = Field(30.0, gt=0)
    episode_timeout_s: float = Field(600.0, gt=0)
    workers: int = Field(1, ge=0)
    concurrency: int = Field(1, ge=1)  # episodes in flight per worker (coroutines on one event loop)
    max_starting: int | None = Field(None, ge=1)  # sandboxes starting at once per worker (default: 2 per core)
    domain_concurrency: dict[str, int] = Field(default_factory=dict)  # per-domain caps, e.g. {web: 8}
    start_timeout_s: float = Field(120.0, gt=0)  # one start, counted once it is admitted
    shutdown_grace_s: float = Field(30.0, ge=0)  # after SIGINT / SIGTERM, for episodes in flight
    price: PriceSection | None = None
    retries: int = Field(2, ge=0)
    sandbox: SandboxSection = SandboxSection()
    backend: Literal["real", "sim"] = "real"
    sim: SimSection | None = None
    # and one section per domain that has options (``web:``, ``mcp:``, ...): see _domain_sections

    @model_validator(mode="wrap")
    @classmethod
    def _domain_sections(cls, data: Any, handler: ModelWrapValidatorHandler[JobConfig]) -> JobConfig:
        """Check each domain's section with that domain's options model (from the registry);
        any other key the job does not know is refused as before."""
        if not isinstance(data, dict):
            return handler(data)
        sections: dict[str, EnvOptions] = {}
        errors: list[InitErrorDetails] = []
        for key in [k for k in data if k not in cls.model_fields]:
            spec = DOMAINS.get(key)
            model = spec.options_model() if spec is not None else None
            if model is None:
                errors.append({"type": "extra_forbidden", "loc": (key,), "input": data[key]})
                continue
            try:
                sections[key] = model.model_validate(data[key])
            except ValidationError as exc:
                errors += _details(exc, key)
        try:
            job = handler({k: v for k, v in data.items() if k in cls.model_fields})
        except ValidationError as exc:
            if not errors:
                raise
            errors = [*_details(exc), *errors]
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        for key, section in sections.items():
            setattr(job, key, section)
        return job

    @model_validator(mode="after")
    def _domain_caps(self) -> JobConfig:
        for d, n in self.domain_concurrency.items():
            if d not in DOMAINS:
                raise ValueError(f"domain_concurrency: unknown domain {d!r} (expected one of {', '.join(DOMAINS)})")
            if n < 1:
                raise ValueError(f"domain_concurrency: {d}: must be at least 1, got {n}")
        return self

    @model_validator(mode="after")
    def _sim(self) -> JobConfig:
        if self.backend == "sim" and self.sim is None:
            raise ValueError("backend: sim needs a sim section naming the model (sim: {model: ...})")
        return self

    def section(self, domain: str) -> EnvOptions | None:
        """The job's options of ``domain`` (its section, or the defaults); None when it has none."""
        given = (self.model_extra or {}).get(domain)
        if given is not None:
            return given
        model = domain_spec(domain).options_model()
        return model() if model is not None else None

    def env_options(self, domain: str) -> dict[str, Any]:
        """Keyword arguments of the domain's environment: ``options`` when it has any."""
        options = self.section(domain)
        return {"options": options} if options is not None else {}

    def sandbox_config(self, run_id: str) -> SandboxConfig:
        s = self.sandbox.model_dump(exclude_none=True)
        return SandboxConfig(**s, run_id=re.sub(r"[^A-Za-z0-9._-]", "-", run_id), exec_timeout_s=self.step_timeout_s)

    def policy_options(self) -> dict[str, Any]:
        return self.policy.model_dump(exclude_none=True)

    def starting_limit(self) -> int:
        """Sandboxes starting at once in a worker: ``max_starting``, else two per core."""
        return self.max_starting or max(2, 2 * (os.cpu_count() or 1))


def load_job(path: str | Path) -> tuple[JobConfig, list[Task]]:
    path = Path(path)
    job = load_yaml_model(path, JobConfig, "job file", show_input=True)
    for d in job.domains or []:
        if d not in DOMAINS:
            raise ConfigError(f"{path}: domains: unknown domain {d!r} (expected one of {', '.join(DOMAINS)})")
    tasks: list[Task] = []
    for suite in job.tasks:
        suite_path = (path.parent / suite) if not Path(suite).is_absolute() else Path(suite)
        if not suite_path.is_file():
            raise ConfigError(f"{path}: tasks: task file {suite} not found (looked at {suite_path})")
        tasks += load_suite(suite_path)
    for key, section in (job.model_extra or {}).items():  # paths relative to the job file, like its task files
        setattr(job, key, section.relative_to(path.parent))
    if job.sim is not None:  # local model folders, tokenizers and recorded stores: relative to the job file too
        for name in ("model", "tokenizer", "recorded"):
            value = getattr(job.sim, name)
            if value and not Path(value).is_absolute() and (path.parent / value).exists():
                setattr(job.sim, name, str(path.parent / value))
    if job.domains:
        tasks = [t for t in tasks if t.domain in job.domains]
    for t in tasks:
        if t.domain not in DOMAINS:
            raise ConfigError(f"{path}: task {t.id}: no collector for domain {t.domain!r} yet (have: {', '.join(DOMAINS)})")
    if not tasks:
        raise ConfigError(f"{path}: no tasks selected")
    return job, tasks
