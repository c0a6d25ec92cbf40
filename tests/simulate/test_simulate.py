"""Simulated environments: SimEnv against the conformance check in every domain, the SFT
prompt, bounded retries and simulation errors, jobs with ``backend: sim`` (provenance,
both resets), the release's ``simulated`` mixture option, ``sim compare`` on a planted
case, and the OpenAI endpoint backend against a real ``trajforge sim serve``."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from collectors.check_env import check_env
from collectors.env import Task
from collectors.jobs import load_job
from collectors.runner import run_job
from collectors.wrappers import Recorder
from pipelines.release.samples import Trajectory, prompts
from pipelines.release.tokens import PieceCounts
from schemas.errors import ConfigError
from schemas.transition import Observation, Provenance
from simulate.backends import LocalBackend, OpenAIBackend, Recording
from simulate.compare import EpisodeSides, report_of
from simulate.config import SimSection
from simulate.env import SimEnv, SimulationError
from simulate.tiny import planted_model
from tests.conftest import cli

OK = "ok\n[exit 0] /work$"  # what the real terminal shows after `echo ok` in /work
START = Observation.make("[exit 0] /work$", "terminal")
ACTIONS = {
    "terminal": {"action": "run", "command": "echo ok"},
    "swe": {"action": "view", "path": "README.md"},
    "web": {"action": "noop"},
    "os": {"action": "wait"},
    "android": {"action": "navigate_home"},
    "mcp": {"action": "call_tool", "name": "now", "arguments": {}},
    "search": {"action": "search", "query": "ok"},
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> str:
    """A real tiny Qwen3 folder whose greedy reply to anything is the `echo ok` observation."""
    return planted_model(tmp_path_factory.mktemp("wm") / "model", OK)


def sim(domain: str, planted: str, backend=None, **over) -> SimEnv:
    opts = SimSection(model=planted, **{"max_new_tokens": 16, **over})
    return SimEnv(domain, opts, "default", initial=lambda task, seed: START, backend=backend)


def task(domain: str = "terminal", n: int = 2, **kw) -> Task:
    return Task(id=f"{domain}/sim", domain=domain, instruction="say ok", actions=(ACTIONS[domain],) * n, **kw)


@pytest.mark.parametrize("domain", sorted(ACTIONS))
def test_simenv_passes_the_conformance_check_in_every_domain(planted, domain):
    check_env(lambda: sim(domain, planted), task(domain))


def test_the_prompt_is_the_sft_samples_prompt_and_predictions_are_the_history(planted):
    spy = Recording(LocalBackend(planted))
    env = sim("terminal", planted, backend=spy)
    rec = Recorder(env, trajectory_id="x", provenance=Provenance(run_id="r"))
    rec.reset(seed=0, task=task(n=3))
    for a in task(n=3).actions:
        obs, *_ = rec.step(a)
        assert obs.text == OK and obs.format == "terminal"
    traj = Trajectory(rec.transitions, frozenset(), "c", {})
    built = prompts(traj, PieceCounts(LocalBackend(planted).counter()), 4096)
    assert [m for m, _ in spy.calls] == [p["messages"] for p in built]  # the release's own code, step by step
    assert spy.calls[2][0][2] == {"role": "assistant", "content": f"<predicted_observation>\n{OK}\n</predicted_observation>"}
    # a small history budget drops the oldest turns, as in the SFT samples
    small = sim("terminal", planted, backend=Recording(LocalBackend(planted)), max_prompt_tokens=64)
    small.reset(seed=0, task=task(n=3))
    for a in task(n=3).actions:
        small.step(a)
    assert "earlier turns omitted" in small.backend.calls[2][0][1]["content"]


def test_a_malformed_prediction_is_retried_at_the_retry_temperature_then_a_simulation_error(planted):
    spy = Recording(LocalBackend(planted))
    env = sim("terminal", planted, backend=spy, max_new_tokens=1, retries=2, retry_temperature=0.9)  # no closing tag
    env.reset(seed=0, task=task())
    with pytest.raises(SimulationError, match=r"terminal step 0: malformed prediction after 3 tries \(no single closed"):
        env.step(ACTIONS["terminal"])
    assert [kw["temperature"] for _, kw in spy.calls] == [0.0, 0.9, 0.9]
    js = sim("mcp", planted, format="json", retries=0)  # well-formed block, but JSON is required
    js.reset(seed=0, task=task("mcp"))
    with pytest.raises(SimulationError, match=r"not valid JSON"):
        js.step(ACTIONS["mcp"])
    # bad actions stay data, exactly as in the real environment
    obs, reward, term, _, info = env.step({"action": "run"})
    assert info["action_error"] and obs == START and reward is None and not term


def write_job(tmp_path: Path, name: str, tasks: list[dict], **over) -> Path:
    (tmp_path / f"{name}-tasks.yaml").write_text(yaml.safe_dump({"tasks": tasks}))
    body = {
        "job_id": name,
        "tasks": [f"{name}-tasks.yaml"],
        "workers": 0,
        "retries": 0,
        "max_steps": 5,
        "sandbox": {"backend": "local", "memory_mb": 512},
        **over,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


TERMINAL_TASKS = [
    {
        "id": "sim/echo-ok",
        "domain": "terminal",
        "env_id": "bash",
        "instruction": "say ok twice",
        "actions": [ACTIONS["terminal"]] * 2,
    },
    {
        "id": "sim/echo-other",
        "domain": "terminal",
        "env_id": "bash",
        "instruction": "say other",
        "files": {"/work/a.txt": "a\n"},
        "actions": [{"action": "run", "command": "echo other"}],
    },
]


def transitions_of(store: Path) -> list:
    from pipelines.store import Store, read_shard
    from schemas.arrow import from_record_batch

    s = Store(str(store))
    return [t for sh in s.readable_shards("raw") for b in read_shard(s.sfs, sh.path) for t in from_record_batch(b)]


def test_a_job_with_backend_sim_records_simulated_provenance_from_both_resets(planted, tmp_path):
    real_store, sim_store = tmp_path / "real", tmp_path / "sim"
    job, tasks = load_job(write_job(tmp_path, "real", TERMINAL_TASKS))
    assert run_job(job, tasks, str(real_store), log=lambda m: None).collected == 2
    real = transitions_of(real_store)
    assert len(real) == 3 and not any(t.provenance.simulated for t in real)

    sampling = {"model": planted, "temperature": 0.0, "max_new_tokens": 16}
    for reset in ("real", "recorded"):
        over = {"reset": reset, "recorded": str(real_store)} if reset == "recorded" else {}
        path = write_job(tmp_path, f"sim-{reset}", TERMINAL_TASKS, backend="sim", sim=sampling | over)
        job, tasks = load_job(path)
        summary = run_job(job, tasks, str(sim_store), log=lambda m: None)
        assert (summary.collected, summary.failed) == (2, 0)
    got = [t for t in transitions_of(sim_store)]
    assert len(got) == 6 and all(t.provenance.simulated and t.provenance.sandbox_backend == "sim" for t in got)
    for t in got:
        simulator = json.loads(t.provenance.extra)["simulator"]
        assert simulator["model"] == planted and simulator["backend"] == "transformers"
        assert simulator["sampling"]["temperature"] == 0.0 and simulator["sampling"]["max_new_tokens"] == 16
        assert t.next_state.text == OK and t.reward is None
        if t.step == 0:  # both resets start where the real episode of the task started
            (first,) = [r for r in real if r.task_id == t.task_id and r.step == 0]
            assert t.state.text == first.state.text

    # a model that never closes its tag: every episode fails, and the ledger says why
    path = write_job(tmp_path, "sim-broken", TERMINAL_TASKS, backend="sim", sim=sampling | {"max_new_tokens": 1, "retries": 1})
    job, tasks = load_job(path)
    summary = run_job(job, tasks, str(sim_store), log=lambda m: None)
    assert (summary.collected, summary.failed) == (0, 2)
    ledger = [json.loads(x) for p in (sim_store / "jobs" / "sim-broken").rglob("*.jsonl") for x in p.read_text().splitlines()]
    assert {e["status"] for e in ledger} == {"failed"}
    assert all(e["reason"].startswith("SimulationError: sim terminal step 0: malformed prediction after 2 tries") for e in ledger)
    assert len(transitions_of(sim_store)) == 6  # nothing of the failed episodes was written


def test_bad_sim_sections_are_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"backend: sim needs a sim section naming the model"):
        load_job(write_job(tmp_path, "a", TERMINAL_TASKS, backend="sim"))
    with pytest.raises(ConfigError, match=r"sim.temprature: unknown key"):
        load_job(write_job(tmp_path, "b", TERMINAL_TASKS, backend="sim", sim={"model": "m", "temprature": 1}))
    with pytest.raises(ConfigError, match=r"sim: reset: recorded needs recorded: <store path>"):
        load_job(write_job(tmp_path, "c", TERMINAL_TASKS, backend="sim", sim={"model": "m", "reset": "recorded"}))


def test_identical_real_and_simulated_outputs_score_one():
    real = [Observation.make(OK, "terminal"), Observation.make('{"a": [1, 2], "b": "x"}', "text")]
    same = EpisodeSides(
        "mcp", "t", real=real, real_ms=[1.0, 2.0], sim=[o.text for o in real], sim_ms=[3.0, 4.0], sim_tokens=[(10, 3), (12, 4)]
    )
    rep = report_of("m", "j", [same])
    assert [(r["exact"], r["chrf"]) for r in rep.steps] == [(1.0, 1.0), (1.0, 1.0)]
    assert "json_f1" not in rep.steps[0] and rep.steps[1]["json_f1"] == 1.0
    assert rep.domains["mcp"] == {"episodes": 1, "diverged": 0, "sim_errors": 0, "median_first_divergence": None}
    off = EpisodeSides(
        "mcp",
        "u",
        real=real,
        real_ms=[1.0, 2.0],
        sim=[OK, None],
        sim_ms=[3.0],
        sim_tokens=[(10, 3)],
        error="SimulationError: ...",
    )
    rep = report_of("m", "j", [off])
    assert rep.steps[1]["exact"] == 0.0 and rep.steps[1]["json_f1"] == 0.0 and "sim_ms" not in rep.steps[1]
    assert rep.domains["mcp"]["median_first_divergence"] == 1.0 and rep.domains["mcp"]["sim_errors"] == 1


def test_sim_compare_runs_real_and_simulated_episodes_and_prints_the_table(planted, tmp_path):
    job = write_job(tmp_path, "cmp", TERMINAL_TASKS)
    out = tmp_path / "compare.json"
    proc = cli("sim", "compare", str(job), "--model", planted, "--max-new-tokens", "16", "--out", str(out))
    assert "| domain | episodes | diverged | median first divergence | sim errors |" in proc.stdout
    assert "| terminal | 2 | 1 | 0.0 | 0 |" in proc.stdout
    assert "| domain | step | episodes | exact | chrf | json_f1 | real_ms | sim_ms | real_tokens |" in proc.stdout
    rep = json.loads(out.read_text())
    by_task = {e["task_id"]: e for e in rep["episodes"]}
    assert by_task["sim/echo-ok"]["first_divergence"] is None  # the planted case: the model says what the terminal says
    assert by_task["sim/echo-other"]["first_divergence"] == 0
    step0, step1 = rep["steps"]
    assert (step0["domain"], step0["step"], step0["episodes"], step0["exact"]) == ("terminal", 0, 2, 0.5)
    assert (step1["step"], step1["episodes"], step1["exact"], step1["chrf"]) == (1, 1, 1.0, 1.0)
    assert step0["real_ms"] > 0 and step0["sim_ms"] > 0 and step0["sim_prompt_tokens"] > 0 and step0["real_tokens"] > 0
    bad = cli("sim", "compare", str(job), check=False)
    assert bad.returncode != 0 and "no model: give --model or a sim section in the job" in bad.stderr


def test_the_openai_backend_against_a_real_sim_serve(planted, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "trajforge", "sim", "serve", "--model", planted, "--port", "0", "--name", "tiny-wm"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 240)  # the model loads, then one line says where it listens
        line = proc.stdout.readline() if ready else ""
        assert line.startswith("serving tiny-wm at http://127.0.0.1:"), line + proc.stderr.read()
        url = line.split(" at ")[1].strip()
        remote = OpenAIBackend(url, "tiny-wm", tokenizer=str(Path(planted) / "tokenizer.json"))
        env = SimEnv(
            "terminal",
            SimSection(model="tiny-wm", base_url=url, max_new_tokens=16),
            "default",
            initial=lambda task, seed: START,
            backend=Recording(remote),
        )
        local = sim("terminal", planted)
        for e in (env, local):
            e.reset(seed=0, task=task())
        for a in task().actions:
            got, *_, info = env.step(a)
            want, *_, local_info = local.step(a)
            assert got.text == want.text == OK
            assert info["sim"]["prompt_tokens"] == local_info["sim"]["prompt_tokens"] > 0  # usage comes back
        assert len(env.backend.calls) == 2
        import requests

        models = requests.get(f"{url}/models", timeout=30).json()
        assert models["data"][0]["id"] == "tiny-wm"
        import openai

        client = openai.OpenAI(base_url=url, api_key="none")
        ask = {"model": "tiny-wm", "messages": [{"role": "user", "content": START.text}], "max_tokens": 16}
        whole = client.chat.completions.create(**ask)
        chunks = list(client.chat.completions.create(**ask, stream=True, stream_options={"include_usage": True}))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
        assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens > 0  # the clients that stream
        bad = requests.post(f"{url}/chat/completions", json={"model": "tiny-wm", "messages": []}, timeout=30)
        assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_release_mixture_excludes_simulated_trajectories_by_default(tmp_path):
    from collectors.synth import Synthesizer
    from pipelines.curate.config import CurationConfig
    from pipelines.curate.run import curate
    from pipelines.query import run_query
    from pipelines.release.build import create_release
    from pipelines.release.config import MixtureConfig, load_mixture
    from pipelines.release.simulated import trajectory_hash as sim_hash
    from pipelines.release.tokens import train_tokenizer
    from pipelines.store import StoreWriter
    from tests.conftest import SMALL

    in_memory = ["--runner=DirectRunner", "--direct_running_mode=in_memory"]
    store = tmp_path / "s"
    gen = Synthesizer(1, **SMALL)
    real = list(gen.transitions(200))
    fake = [
        t.evolve(trajectory_id="sim-" + t.trajectory_id, provenance=Provenance(run_id="sim", simulated=True))
        for t in Synthesizer(2, **SMALL).transitions(200)
    ]
    with StoreWriter(str(store), gen.run_id) as w:
        w.write_many(real)
    with StoreWriter(str(store), "sim") as w:
        w.write_many(fake)
    curate(CurationConfig(), str(store), beam_args=in_memory, log=lambda m: None)
    train_tokenizer([t.next_state.text for t in real[:100]], str(store / "tokenizer.json"), vocab_size=400)
    base = load_mixture("examples/mixtures/default.yaml", str(store)).model_dump()

    def trajectories(version: str, simulated: dict) -> set[str]:
        cfg = MixtureConfig.model_validate({**base, "simulated": simulated, "stages": {"sft": {}}})
        create_release(cfg, str(store), "wm", version, beam_args=in_memory, log=lambda m: None)
        import pyarrow.parquet as pq

        files = sorted((store / "releases" / "wm" / version / "data" / "sft").glob("*.parquet"))
        return {t for f in files for t in pq.read_table(f, columns=["trajectory_id"]).column(0).to_pylist()}

    included = trajectories("include", {"use": "include"})
    simulated = {t for t in included if t.startswith("sim-")}
    real_ids = included - simulated
    assert simulated and real_ids  # curation kept both kinds
    assert trajectories("default", {}) == real_ids  # exclude is the default: not one simulated sample
    capped = trajectories("cap", {"use": "cap", "max_share": 0.2})
    manifest = json.loads((store / "releases" / "wm" / "cap" / "manifest.json").read_text())
    cfg = MixtureConfig.model_validate(manifest["config"])
    bound = cfg.simulated.keep_below
    assert capped - real_ids == {t for t in simulated if sim_hash(cfg, t) < bound}  # the lowest hashes, no others
    assert capped >= real_ids and 0 < len(capped - real_ids) < len(simulated)
    curated = run_query("SELECT DISTINCT trajectory_id, provenance.simulated FROM curated", str(store)).to_pylist()
    real_n = sum(1 for r in curated if not r["simulated"])
    sim_n = sum(1 for r in curated if r["simulated"] and sim_hash(cfg, r["trajectory_id"]) < bound)
    assert sim_n / (real_n + sim_n) <= 0.2 < (sim_n + 1) / (real_n + sim_n + 1)  # as many as the share allows


def test_cap_keeps_the_lowest_hashes_within_the_share():
    from pipelines.release import simulated
    from pipelines.release.config import MixtureConfig

    cfg = MixtureConfig.model_validate({"simulated": {"use": "cap", "max_share": 0.25}})
    ids = [f"s{i}" for i in range(40)]
    bound = simulated.cap_bound(cfg, real=30, simulated=ids)  # at most 10 of 40 simulated next to 30 real
    kept = [t for t in ids if simulated.trajectory_hash(cfg, t) < bound]
    assert len(kept) == 10 and set(kept) == set(sorted(ids, key=lambda t: simulated.trajectory_hash(cfg, t))[:10])
    assert simulated.cap_bound(cfg, real=300, simulated=ids) == 1.0
    assert simulated.cap_bound(cfg, real=0, simulated=ids) == min(simulated.trajectory_hash(cfg, t) for t in ids)
    with pytest.raises(ValueError, match="use: cap needs max_share"):
        MixtureConfig.model_validate({"simulated": {"use": "cap"}})


def test_the_shipped_sim_job_runs_with_a_model_in_place_of_the_demo_one(planted, tmp_path):
    body = yaml.safe_load(Path("examples/jobs/terminal-swe-sim.yaml").read_text())
    assert body["backend"] == "sim" and body["sim"]["model"] == "../../demo-store/runs/tiny-sft"
    root = Path("examples/jobs").resolve()
    body |= {
        "tasks": [str((root / t).resolve()) for t in body["tasks"]],
        "domains": ["terminal"],
        "sim": body["sim"] | {"model": planted, "max_new_tokens": 16},
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(body))
    job, tasks = load_job(path)
    summary = run_job(job, tasks, str(tmp_path / "store"), log=lambda m: None)
    assert (summary.collected, summary.failed) == (len(tasks), 0) and summary.transitions >= len(tasks)
    assert all(t.provenance.simulated for t in transitions_of(tmp_path / "store"))
