"""The web environment against real Chromium (Debian's, driven by Playwright) and the
shipped sites on 127.0.0.1: conformance, scripted episodes that pass their checks,
exploration inside the allowed origins, blocked navigation, a page that never settles,
a browser killed mid-episode, and the example job through the front door."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

from collectors.check_env import check_env
from collectors.env import EnvError, load_suite
from collectors.policies import ExplorationPolicy
from collectors.web.env import WebEnv, WebOptions
from pipelines.query import run_query
from tests.conftest import cli

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TASKS = {t.id: t for t in load_suite(ROOT / "examples" / "tasks" / "web.yaml")}


@pytest.fixture(scope="module", autouse=True)
def _driver():
    """Playwright's driver runs an asyncio loop in this thread: stop it when the module ends,
    so later tests (asyncio.run) do not find a running loop."""
    yield
    from collectors.web.env import stop_playwright_driver

    stop_playwright_driver()


@pytest.fixture(scope="module")
def env():
    with WebEnv(options=WebOptions(settle_timeout_ms=1500)) as e:
        yield e


def test_check_env_conformance():
    check_env(lambda: WebEnv(options={"settle_timeout_ms": 1500}), TASKS["web/wiki-edit-kettle"])


@pytest.mark.parametrize("task_id", [t for t, task in TASKS.items() if task.check])
def test_scripted_episodes_reach_their_success_check(env, task_id):
    task = TASKS[task_id]
    obs, _ = env.reset(seed=0, task=task)
    assert obs.format == "a11y_tree" and obs.text.startswith("URL: http://127.0.0.1:")
    assert env.check_task(task)[0] == 0.0  # a fresh database: not done yet
    for action in task.actions:
        obs, _, _, _, info = env.step(action)
        assert info["action_error"] is None, (action, info["action_error"])
        assert info["settle_ms"] >= 0 and obs.extra_dict["settled"]
    assert env.check_task(task)[0] == 1.0
    env.reset(seed=0, task=task)  # the next episode starts from the seed data again
    assert env.check_task(task)[0] == 0.0


def test_observation_names_elements_by_bid_and_marks_the_port(env):
    obs, _ = env.reset(task=TASKS["web/shop-buy-kettle"])
    assert '[search] searchbox "Search products"' in obs.text and '[search-go] button "Search"' in obs.text
    assert 'heading "Shop" level=1' in obs.text and '[product-1] link "Blue Kettle"' in obs.text
    port = obs.text.split("127.0.0.1:")[1].split("/")[0]
    assert any(obs.text[s.start : s.end] == port and s.kind == "port" for s in obs.volatile_spans)
    obs, _, _, _, info = env.step({"action": "fill", "bid": "search", "text": "tea"})
    assert 'value="tea"' in obs.text
    _, _, _, _, info = env.step({"action": "click", "bid": "nope"})
    assert info["action_error"] == "no element with bid 'nope' on this page"
    obs, _, _, _, info = env.step({"action": "new_tab", "url": "/wiki/"})
    assert info["action_error"] is None and "Tabs: [0] Shop | [1]* Wiki" in obs.text
    obs, _, _, _, info = env.step({"action": "switch_tab", "index": 0})
    assert "Title: Shop" in obs.text
    _, _, _, _, info = env.step({"action": "switch_tab", "index": 5})
    assert info["action_error"] == "no tab 5 (there are 2)"
    _, _, terminated, _, info = env.step({"action": "send_msg_to_user", "text": "done"})
    assert terminated and json.loads(info["action"].canonical)["text"] == "done"


def test_navigation_outside_the_allowed_origins_is_blocked(env):
    env.reset(task=TASKS["web/shop-buy-kettle"])
    before = env.observation
    _, _, _, _, info = env.step({"action": "goto", "url": "https://example.org/"})
    assert info["action_error"] == "navigation to https://example.org/ blocked: origin not in the allowed list"
    env.step({"action": "click", "bid": "product-2"})
    obs, _, _, _, info = env.step({"action": "click", "bid": "maker"})  # a link off the site: routing aborts it
    assert "https://example.org/kettles" in obs.extra_dict["blocked"]
    assert urlparse(env.page.url).hostname in ("127.0.0.1", None) or env.page.url.startswith("chrome-error://")
    assert before.text != obs.text


def test_exploration_stays_inside_the_allowed_origins(env):
    for task in TASKS.values():
        policy = ExplorationPolicy(max_steps=12)
        obs, _ = env.reset(seed=3, task=task)
        policy.reset(task, 3)
        history, urls = [], []
        while (action := policy.act(obs, history)) is not None:
            obs, _, terminated, _, _ = env.step(action)
            history.append((action, obs))
            urls += [obs.extra_dict["url"], *obs.extra_dict["tabs"]]
            if terminated:
                break
        assert len(history) >= 5
        assert all(u.startswith((env.server.url, "chrome-error://", "about:blank")) for u in urls), urls


def test_a_page_that_never_settles_is_waited_for_boundedly_and_flagged(env):
    env.reset(task=TASKS["web/shop-buy-kettle"])
    obs, _, _, _, info = env.step({"action": "goto", "url": "/slow/"})
    assert obs.extra_dict["settled"] is False
    assert 1500 <= info["settle_ms"] < 1500 + 2000  # the bound (1.5 s) plus the observation's own time at most
    obs, _, _, _, _ = env.step({"action": "goto", "url": "/wiki/"})
    assert obs.extra_dict["settled"] is True


def _chromium_children() -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                cmd = (d / "cmdline").read_bytes().split(b"\0")[0]
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if b"chrom" in cmd and ppid != 1 and "--type=" not in (d / "cmdline").read_bytes().decode(errors="replace"):
                pids.append(int(d.name))
    return pids


def test_a_browser_killed_mid_episode_is_an_infrastructure_error_and_is_restarted():
    task = TASKS["web/tracker-close-issue"]
    with WebEnv(options={"settle_timeout_ms": 1500}) as env:
        env.reset(task=task)
        env.step(task.actions[0])
        browsers = _chromium_children()
        assert browsers
        for pid in browsers:
            os.kill(pid, signal.SIGKILL)
        with pytest.raises(EnvError, match="web: "):
            for action in task.actions[1:]:
                env.step(action)
        env.reset(task=task)  # the retry: a new browser, the same task from the start
        assert env.restarts == 1
        for action in task.actions:
            assert env.step(action)[4]["action_error"] is None
        assert env.check_task(task)[0] == 1.0


def test_example_jobs_collect_web_episodes(tmp_path):
    store = tmp_path / "store"
    out = cli("collect", str(ROOT / "examples" / "jobs" / "web.yaml"), "--store", str(store))
    assert "5 episodes collected" in out.stdout and "0 failed" in out.stdout
    cli("collect", str(ROOT / "examples" / "jobs" / "web-explore.yaml"), "--store", str(store))
    sql = (
        "SELECT provenance.job_id AS job, task_id, count(*) AS steps, max(reward) AS reward, "
        "any_value(next_state.format) AS fmt FROM transitions GROUP BY 1, 2 ORDER BY 1, 2"
    )
    rows = [json.loads(line) for line in cli("query", sql, "--store", str(store), "--format", "json").stdout.splitlines()]
    scripted = {r["task_id"]: r for r in rows if r["job"] == "web"}
    assert set(scripted) == set(TASKS) and all(r["fmt"] == "a11y_tree" for r in rows)
    assert all(scripted[t]["reward"] == 1.0 for t, task in TASKS.items() if task.check)
    explored = [r for r in rows if r["job"] == "web-explore"]
    assert len(explored) == len(TASKS) and all(r["steps"] >= 5 for r in explored)


def test_the_same_environment_serves_a_users_own_site_by_url():
    from collectors.env import Task
    from collectors.web.sites.server import SiteServer

    site = SiteServer().start()  # stands in for a self-hosted app (WebArena-style) at some URL
    try:
        task = Task(
            id="own/wiki", domain="web", env_id="intranet", instruction="Open the wiki.", extra={"start_url": f"{site.url}/wiki/"}
        )
        with WebEnv(env_id="intranet", options={"allowed_origins": [site.url], "settle_timeout_ms": 1500}) as env:
            assert env.server is None
            obs, _ = env.reset(task=task)
            assert '[article-kettle] link "Kettle"' in obs.text
            obs, _, _, _, info = env.step({"action": "click", "bid": "article-kettle"})
            assert info["action_error"] is None and "Title: Kettle" in obs.text
            assert env.check_task(task) == (None, "no check")
        with WebEnv(env_id="intranet", options={"settle_timeout_ms": 1500}) as env:  # its origin not allowed
            with pytest.raises(EnvError, match="not in the allowed origins"):
                env.reset(task=task)
    finally:
        site.stop()


def test_web_episodes_run_side_by_side_each_on_its_own_thread(tmp_path):
    """Concurrent web episodes: each pooled environment has a thread, a Playwright driver
    and a browser of its own (the sync API is bound to its thread); all five succeed."""
    import yaml

    from collectors.jobs import load_job
    from collectors.runner import run_job

    body = yaml.safe_load((ROOT / "examples" / "jobs" / "web.yaml").read_text())
    body |= {"tasks": [str(ROOT / "examples" / "tasks" / "web.yaml")], "workers": 0, "concurrency": 3, "job_id": "web-conc"}
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(body))
    job, tasks = load_job(tmp_path / "job.yaml")
    summary = run_job(job, tasks, str(tmp_path / "store"), log=lambda m: None)
    assert summary.collected == len(TASKS) and summary.failed == 0, summary.failures
    rewards = run_query("SELECT task_id, max(reward) AS r FROM transitions GROUP BY 1", str(tmp_path / "store")).to_pylist()
    assert all(r["r"] == 1.0 for r in rewards if TASKS[r["task_id"]].check)
    from collectors import rollouts
    from collectors.web import env as web_env

    assert rollouts.live_envs() == [] and not [k for k in web_env._DRIVER if k[1] != threading.get_ident()]
