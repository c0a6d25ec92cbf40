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
    retries: 2                      # infrastructure failures per episode
    sandbox: {backend: local, memory_mb: 512}
    web: {allowed_origins: [], screenshot: false}  # web episodes only
    mcp: {call_timeout_s: 30, servers: {mine: {command: my-server, args: [--db, "{workspace}/x.db"]}}}
    search: {corpus: docs.jsonl}    # search episodes with env_id other than pydoc
    os: {screen: [1280, 800], screenshot: false}  # desktop episodes only
    android: {serials: [emulator-5554, emulator-5556]}  # worker i uses serials[i % n]; or {simulator: true}
    backend: sim                    # optional: a world model plays every environment (simulate)
    sim: {model: runs/sft/final, temperature: 0.0}  # which model and how it samples (simulate.config)

Unknown keys, wrong types, missing task files and unknown domains are refused with the
file, the key and what was expected.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from collectors.env import Task, load_suite
from sandboxes.base import SandboxConfig
from schemas.config import StrictConfig, load_yaml_model
from schemas.errors import ConfigError
from schemas.transition import DOMAINS
from simulate.config import SimSection


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


class WebSection(StrictConfig):
    """Settings of web episodes (``collectors.web.env.WebOptions``)."""

    allowed_origins: list[str] = Field(default_factory=list)  # the shipped sites' origin is always allowed
    screenshot: bool = False
    html: bool = False
    settle_timeout_ms: int = Field(3000, ge=100)
    obs_cap_chars: int = Field(20_000, ge=1000)
    action_timeout_ms: int = Field(5000, ge=100)


class MCPServerSection(StrictConfig):
    """A server of the job's own: a command run over stdio, or a streamable HTTP url."""

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str | None = None

    @model_validator(mode="after")
    def _one_transport(self) -> MCPServerSection:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either command (stdio) or url (streamable HTTP)")
        return self


class MCPSection(StrictConfig):
    """Settings of MCP episodes (``collectors.mcp.env.MCPOptions``); a task's env_id names the server."""

    servers: dict[str, MCPServerSection] = Field(default_factory=dict)
    call_timeout_s: float = Field(30.0, gt=0)
    startup_timeout_s: float = Field(30.0, gt=0)
    obs_cap_chars: int = Field(20_000, ge=1000)


class SearchSection(StrictConfig):
    """Settings of search episodes (``collectors.search.env.SearchOptions``)."""

    corpus: str | None = None  # JSONL/Parquet of {id, url, title, text}; None for env_id pydoc
    index_dir: str | None = None  # default: $TRAJFORGE_CACHE/search/<env_id>
    page_chars: int = Field(4000, ge=200)
    snippet_chars: int = Field(200, ge=50)
    find_context: int = Field(80, ge=0)
    max_find: int = Field(10, ge=1)


class OSSection(StrictConfig):
    """Settings of OS (desktop) episodes (``collectors.os.env.OSOptions``)."""

    screen: tuple[int, int] = (1280, 800)
    obs_cap_chars: int = Field(20_000, ge=1000)
    screenshot: bool = False
    settle_min_s: float = Field(0.15, ge=0)
    settle_timeout_s: float = Field(3.0, gt=0)
    app_timeout_s: float = Field(15.0, gt=0)
    start_timeout_s: float = Field(15.0, gt=0)
    check_wait_s: float = Field(2.0, ge=0)


class AndroidSection(StrictConfig):
    """Settings of Android episodes (``collectors.android.env.AndroidOptions``)."""

    serials: list[str] = Field(default_factory=list)
    simulator: bool = False
    adb_port: int | None = None
    screenshot: bool = False
    obs_cap_chars: int = Field(20_000, ge=1000)
    dump_retries: int = Field(3, ge=0)
    dump_backoff_s: float = Field(0.2, ge=0)
    command_timeout_s: float = Field(30.0, gt=0)
    settle_s: float = Field(0.0, ge=0)
    apps: dict[str, str] = Field(default_factory=dict)


class JobConfig(StrictConfig):
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
    retries: int = Field(2, ge=0)
    sandbox: SandboxSection = SandboxSection()
    web: WebSection = WebSection()
    mcp: MCPSection = MCPSection()
    search: SearchSection = SearchSection()
    os: OSSection = OSSection()
    android: AndroidSection = AndroidSection()
    backend: Literal["real", "sim"] = "real"
    sim: SimSection | None = None

    @model_validator(mode="after")
    def _sim(self) -> JobConfig:
        if self.backend == "sim" and self.sim is None:
            raise ValueError("backend: sim needs a sim section naming the model (sim: {model: ...})")
        return self

    def env_options(self, domain: str) -> dict[str, Any]:
        section = {"web": self.web, "mcp": self.mcp, "search": self.search, "os": self.os, "android": self.android}.get(domain)
        return {"options": section.model_dump(exclude_none=True)} if section is not None else {}

    def sandbox_config(self, run_id: str) -> SandboxConfig:
        s = self.sandbox.model_dump(exclude_none=True)
        return SandboxConfig(**s, run_id=re.sub(r"[^A-Za-z0-9._-]", "-", run_id), exec_timeout_s=self.step_timeout_s)

    def policy_options(self) -> dict[str, Any]:
        return self.policy.model_dump(exclude_none=True)


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
    for name in ("corpus", "index_dir"):  # relative to the job file, like its task files
        value = getattr(job.search, name)
        if value and not Path(value).is_absolute():
            setattr(job.search, name, str(path.parent / value))
    if job.sim is not None:  # local model folders, tokenizers and recorded stores: relative to the job file too
        for name in ("model", "tokenizer", "recorded"):
            value = getattr(job.sim, name)
            if value and not Path(value).is_absolute() and (path.parent / value).exists():
                setattr(job.sim, name, str(path.parent / value))
    if job.domains:
        tasks = [t for t in tasks if t.domain in job.domains]
    from collectors.registry import ENVIRONMENTS

    for t in tasks:
        if t.domain not in ENVIRONMENTS:
            raise ConfigError(f"{path}: task {t.id}: no collector for domain {t.domain!r} yet (have: {', '.join(ENVIRONMENTS)})")
    if not tasks:
        raise ConfigError(f"{path}: no tasks selected")
    return job, tasks
