"""The registry is the one description of a domain: every spec resolves, the modules that
used to keep their own tables agree with it, and an eighth domain registered here (a tiny
counter) runs through the conformance check, a job file and a collection run."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import yaml
from pydantic import Field

from collectors import runner
from collectors.actions import ActionSpace, ActionSpec
from collectors.check_env import check_env
from collectors.env import Environment, EnvOptions, Task
from collectors.explore import Explorer
from collectors.jobs import load_job
from collectors.policies import ExplorationPolicy
from collectors.registry import make_env
from collectors.synth import Synthesizer, SyntheticDomain
from pipelines.query import run_query
from pipelines.release.samples import ENVIRONMENTS, system_prompt
from schemas.domains import DOMAINS, domain, register, unregister
from schemas.errors import ConfigError
from schemas.transition import DOMAINS as NAMES
from schemas.transition import FORMATS, Action, Observation


@pytest.mark.parametrize("name", list(DOMAINS))
def test_every_spec_resolves_and_agrees_with_its_parts(name):
    spec = domain(name)
    cls, space = spec.env_class(), spec.action_space()
    assert issubclass(cls, Environment) and cls.domain == name
    assert cls.action_space is space and space.domain == name and space.describe()
    assert spec.end_actions <= set(space.actions)
    assert spec.formats and set(spec.formats) <= FORMATS and spec.format == spec.formats[0]
    model = spec.options_model()
    assert model is None or (issubclass(model, EnvOptions) and cls.options_model is model)
    if model is not None:
        assert model().model_config["frozen"] and model.model_config["extra"] == "forbid"
    gen = spec.synthesizer()
    assert isinstance(gen, SyntheticDomain) and (gen.format or spec.format) in spec.formats
    assert issubclass(spec.explorer_class(), Explorer)
    assert ENVIRONMENTS[name] == spec.description and spec.description in system_prompt(name, "e")


def test_synthetic_formats_are_the_environments_own():
    ts = list(Synthesizer(0, min_obs_bytes=100, max_obs_bytes=200, pool_size=20).transitions(300))
    assert {t.domain for t in ts} == set(DOMAINS)
    for t in ts:
        assert t.next_state.format in domain(t.domain).formats
    assert {t.next_state.format for t in ts if t.domain == "mcp"} == {"text"}  # what the MCP environment emits


def test_unknown_domain_is_one_line_naming_the_known_ones():
    with pytest.raises(ConfigError) as err:
        domain("desktop")
    assert str(err.value) == f"unknown domain 'desktop' (expected one of {', '.join(DOMAINS)})"
    with pytest.raises(ConfigError, match="registered already"):
        register("web", description="x", formats=("text",), env="m:a", actions="m:b")
    with pytest.raises(ConfigError, match="domain name 'Bad Name'"):
        register("Bad Name", description="x", formats=("text",), env="m:a", actions="m:b")


# -- an eighth domain: a counter ----------------------------------------------------------------
@dataclass(frozen=True)
class Add(ActionSpec):
    """Add `n` to the counter."""

    kind = "add"
    n: int = 1


@dataclass(frozen=True)
class Done(ActionSpec):
    """End the episode."""

    kind = "done"


COUNTER_ACTIONS = ActionSpace("counter", [Add, Done])


class CounterOptions(EnvOptions):
    start: int = Field(0, ge=0)


class CounterEnv(Environment):
    domain = "counter"

    def __init__(self, sandbox=None, env_id: str = "default", options: CounterOptions | dict | None = None) -> None:
        super().__init__(env_id, options)
        self.value = 0

    def _reset(self, seed, task):
        self.value = self.options.start
        return Observation.make(f"counter: {self.value}", "text"), {}

    def _step(self, action):
        if isinstance(action, Done):
            return Observation.make(f"counter: {self.value} (done)", "text"), float(self.value >= 3), True, {}
        self.value += action.n
        return Observation.make(f"counter: {self.value}", "text"), None, False, {}

    def _close(self) -> None:
        pass


class CounterExplorer(Explorer):
    def explore(self, observation):
        return {"action": "add", "n": self.rng.randint(1, 3)}


COUNTER = SyntheticDomain(
    ("counter",),
    lambda r: f"counter: {r.randint(0, 99)}",
    lambda r, w: Action.make("add", n=r.randint(1, 3)),
    lambda r, action, step: ("", {}),
)

HERE = __name__


@pytest.fixture
def counter():
    spec = register(
        "counter",
        description="A counter. An observation is its value.",
        formats=("text",),
        env=f"{HERE}:CounterEnv",
        actions=f"{HERE}:COUNTER_ACTIONS",
        options=f"{HERE}:CounterOptions",
        synthetic=f"{HERE}:COUNTER",
        explorer=f"{HERE}:CounterExplorer",
        end_actions={"done"},
    )
    yield spec
    unregister("counter")


TASK = {
    "id": "counter/three",
    "domain": "counter",
    "instruction": "count to three",
    "actions": [{"action": "add", "n": 2}, {"action": "add"}, {"action": "done"}],
}


def test_an_eighth_domain_is_one_registry_line(counter, tmp_path):
    assert "counter" in NAMES and len(NAMES) == 8
    test_every_spec_resolves_and_agrees_with_its_parts("counter")
    task = Task(**TASK)
    check_env(lambda: counter.make(options={"start": 1}), task)
    policy = ExplorationPolicy(max_steps=2)
    policy.reset(task, 0)
    assert policy.act(Observation("counter: 0"), [])["action"] == "add"
    ts = list(Synthesizer(0, domains=("counter",), min_obs_bytes=100, max_obs_bytes=200, pool_size=5).transitions(20))
    assert {t.domain for t in ts} == {"counter"}

    (tmp_path / "tasks.yaml").write_text(yaml.safe_dump([TASK]))
    body = {"job_id": "count", "tasks": ["tasks.yaml"], "workers": 0, "counter": {"start": 1}}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(body))
    job, tasks = load_job(tmp_path / "job.yaml")
    assert job.env_options("counter")["options"] == CounterOptions(start=1)
    with make_env("counter", job.sandbox_config("r"), **job.env_options("counter")) as env:
        assert env.reset(task=tasks[0])[0].text == "counter: 1"
    summary = runner.run_job(job, tasks, str(tmp_path / "store"))
    assert (summary.collected, summary.failed) == (1, 0)
    rows = run_query("SELECT domain, next_state.text AS t FROM transitions ORDER BY step", str(tmp_path / "store"))
    assert [r["t"] for r in rows.to_pylist()] == ["counter: 3", "counter: 4", "counter: 4 (done)"]

    (tmp_path / "job.yaml").write_text(yaml.safe_dump({**body, "counter": {"start": -1, "bogus": 1}}))
    with pytest.raises(ConfigError, match=r"job.yaml: counter.start: Input should be greater than or equal to 0"):
        load_job(tmp_path / "job.yaml")


def test_explorers_are_seeded():
    task = Task(id="t", domain="swe", instruction="x")
    runs = []
    for _ in range(2):
        p = ExplorationPolicy(max_steps=3)
        p.reset(task, 7)
        runs.append([p.act(Observation("a.py\nb.py"), []) for _ in range(4)])
    assert runs[0] == runs[1] and runs[0][-1] == {"action": "submit"}  # SWE submits when the steps run out


def test_wrappers_reach_the_innermost_env_and_limit_steps(counter):
    """``unwrapped`` ends at the environment under any stack of wrappers (Gymnasium's
    meaning); ``StepLimit`` truncates after the step budget, ``WallTimeLimit`` on time."""
    from collectors.wrappers import StepLimit, WallTimeLimit

    env = counter.make()
    wrapped = StepLimit(WallTimeLimit(env, 3600), 2)
    assert wrapped.unwrapped is env and env.unwrapped is env
    wrapped.reset(task=Task(**TASK))
    assert wrapped.step({"action": "add"})[3] is False
    _, _, terminated, truncated, info = wrapped.step({"action": "add"})
    assert (terminated, truncated, info["truncated_by"]) == (False, True, "step_limit")
    timed = WallTimeLimit(counter.make(), 0.0)
    timed.reset(task=Task(**TASK))
    assert timed.step({"action": "add"})[4]["truncated_by"] == "time_limit"
