"""The OS environment on a real desktop (Xvfb, openbox, the AT-SPI bus, mousepad and
zenity from Debian): conformance, scripted tasks that reach their checks, the tree
recorded before and after every action, bad actions as data, bounded waits and typed
errors for a window that never appears and an X server killed mid-episode (retried by
the runner), no process left after many episodes, exploration, and the example job."""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from pathlib import Path

import pytest

from collectors.check_env import check_env
from collectors.env import EnvError, Task, load_suite
from collectors.os.env import OSEnv, OSOptions
from collectors.os.session import marked_pids
from collectors.policies import ExplorationPolicy
from collectors.runner import EpisodeSpec, run_episode
from collectors.wrappers import Recorder
from schemas.transition import Provenance
from tests.conftest import cli

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TASKS = {t.id: t for t in load_suite(ROOT / "examples" / "tasks" / "os.yaml")}
FAST = {"check_wait_s": 0.3, "app_timeout_s": 10.0}


@pytest.fixture(scope="module")
def env():
    with OSEnv(options=OSOptions(**FAST)) as e:
        yield e


def test_check_env_conformance():
    check_env(lambda: OSEnv(options=FAST), TASKS["os/zenity-entry-name"])


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_scripted_tasks_reach_their_check_with_the_tree_recorded(env, task_id):
    task = TASKS[task_id]
    rec = Recorder(env, trajectory_id=task_id, provenance=Provenance(run_id="test"))
    obs, _ = rec.reset(seed=0, task=task)
    assert obs.format == "a11y_tree" and obs.text.startswith("Active window: [")
    assert env.check_task(task)[0] == 0.0
    for action in task.actions:
        _, _, _, _, info = rec.step(action)
        assert info["action_error"] is None, (action, info["action_error"])
    deadline = time.monotonic() + 15  # FAST checks wait 0.3 s; a loaded machine may need longer to write the answer
    while (checked := env.check_task(task)) != (1.0, "ok") and time.monotonic() < deadline:
        pass
    assert checked == (1.0, "ok")
    steps = rec.transitions
    assert len(steps) == len(task.actions)
    assert all(t.state.format == t.next_state.format == "a11y_tree" for t in steps)
    assert all(t.next_state.text == u.state.text for t, u in itertools.pairwise(steps))
    typed = [t for t in steps if t.action.kind in ("type_text", "set_text")]  # a text value (or a title) changes
    assert all(t.state.text != t.next_state.text for t in typed) and steps[0].state.text != steps[-1].next_state.text
    extra = steps[0].next_state.extra_dict
    assert extra["tree_ms"] > 0 and extra["settled"] and isinstance(extra["windows"], list)
    env.reset(seed=0, task=task)  # a fresh desktop: not done yet
    assert env.check_task(task)[0] == 0.0


def test_bad_actions_are_data_and_an_app_crash_is_an_observation(env):
    obs, _ = env.reset(task=TASKS["os/zenity-entry-name"])
    assert '[zenity:0.0.1.0.1] push button "OK"' in obs.text
    for action, error in [
        ({"action": "click_node", "id": "zenity:9.9"}, "no node with id 'zenity:9.9'"),
        ({"action": "click", "x": 5000, "y": 10}, "click.x=5000 is off the screen (1280x800)"),
        ({"action": "press", "key": "NoSuchKey"}, "No such key name"),
        ({"action": "wait", "seconds": 60}, "wait.seconds: expected 0 to 10"),
    ]:
        after, _, terminated, _, info = env.step(action)
        assert error in info["action_error"] and after == obs and not terminated
    obs, _, _, _, info = env.step({"action": "set_text", "id": "zenity:0.0.0.0.1", "text": "x"})
    assert "value='x'" in obs.text
    zenity = [p for p in env.session.pids() if Path(f"/proc/{p}/comm").read_text().strip() == "zenity"]
    os.kill(zenity[0], signal.SIGSEGV)
    obs, _, _, _, info = env.step({"action": "wait", "seconds": 0.5})
    assert info["action_error"] is None and "Windows: none" in obs.text


def test_a_window_that_never_appears_is_a_bounded_typed_error():
    crash = Task(
        id="os/crash",
        domain="os",
        instruction="-",
        setup=("bash -c 'echo dying >&2; kill -SEGV $$' &",),
        extra={"window": "Crashy"},
    )
    with OSEnv(options={"app_timeout_s": 2.0}) as e:
        t0 = time.monotonic()
        with pytest.raises(EnvError, match=r"window titled 'Crashy' did not happen within 2 s.*dying"):
            e.reset(task=crash)
        assert time.monotonic() - t0 < 8


def test_x_server_killed_mid_episode_is_env_error_and_the_runner_retries(tmp_path, env):
    env.reset(task=TASKS["os/zenity-question-no"])
    env.session.xvfb.kill()
    with pytest.raises(EnvError, match=r"X server .* died"):
        env.step({"action": "press", "key": "tab"})
    flag = tmp_path / "killed-once"
    killer = f'(sleep 1; [ -e {flag} ] || {{ touch {flag}; pkill -KILL -f "^Xvfb $DISPLAY "; }}) &'
    task = TASKS["os/zenity-question-no"]
    task = Task(
        **{
            **task.__dict__,
            "id": "os/x-dies-once",
            "setup": (*task.setup, killer),
            "actions": ({"action": "wait", "seconds": 2.0}, *task.actions),
        }
    )
    spec = EpisodeSpec("os-test", "run", task, 0, 0, {"job_id": "os-test", "tasks": ["x"], "os": FAST})
    result = run_episode(spec, retries=2)
    assert flag.exists() and result.ok and result.attempts == 2
    assert "X server" in result.retried_after[0] and result.transitions[-1].reward == 1.0


def test_no_process_outlives_many_episodes():
    roots, started = [], []
    with OSEnv(options=FAST) as e:
        for _ in range(5):
            e.reset(task=TASKS["os/zenity-question-no"])
            roots.append((e.session.root, e.session.display))
            started += e.session.pids()
            assert len(e.session.pids()) >= 6  # Xvfb, dbus, at-spi launcher and bus, openbox, helper, zenity
        e.step({"action": "press", "key": "escape"})
    assert not any(marked_pids(str(root)) for root, _ in roots)
    assert not [p for p in started if Path(f"/proc/{p}").exists() and Path(f"/proc/{p}/stat").read_text().split()[2] != "Z"]
    for root, display in roots:
        assert not root.exists() and not Path(f"/tmp/.X{display[1:]}-lock").exists()


def test_exploration_mostly_acts_on_real_elements(env):
    task = TASKS["os/mousepad-edit-draft"]
    policy = ExplorationPolicy(max_steps=10)
    policy.reset(task, seed=3)
    obs, _ = env.reset(seed=3, task=task)
    errors, kinds = 0, []
    while (action := policy.act(obs, [])) is not None:
        obs, _, _, _, info = env.step(action)
        errors += info["action_error"] is not None
        kinds.append(action["action"])
    assert len(kinds) == 10 and errors <= 3, (kinds, errors)
    assert {"click_node", "set_text", "type_text"} & set(kinds)


def test_example_job_collects_every_task_through_the_cli(tmp_path):
    store = tmp_path / "store"
    out = cli("collect", str(ROOT / "examples" / "jobs" / "os.yaml"), "--store", str(store))
    assert f"{len(TASKS)} episodes collected" in out.stdout and "0 failed" in out.stdout
    sql = (
        "SELECT task_id, max(reward) AS reward, count(*) AS steps, min(state.format) AS fmt, CAST(sum(CASE WHEN "
        "state.text = next_state.text THEN 0 ELSE 1 END) AS INT) AS changed FROM transitions GROUP BY 1"
    )
    rows = [json.loads(line) for line in cli("query", sql, "--store", str(store), "--format", "json").stdout.splitlines()]
    assert {r["task_id"] for r in rows} == set(TASKS) and all(r["reward"] == 1.0 and r["fmt"] == "a11y_tree" for r in rows)
    assert {r["task_id"]: r["steps"] for r in rows} == {t: len(task.actions) for t, task in TASKS.items()}
    assert all(r["changed"] >= 1 for r in rows)


def test_a_screenshot_is_the_real_screen_as_png_when_asked():
    import struct

    task = next(iter(TASKS.values()))
    with OSEnv(options=OSOptions(**FAST, screenshot=True)) as env:
        obs, _ = env.reset(seed=0, task=task)
        assert obs.screenshot_png is not None and obs.screenshot_png.startswith(b"\x89PNG\r\n\x1a\n")
        width, height = struct.unpack(">II", obs.screenshot_png[16:24])  # the IHDR chunk: the Xvfb screen's size
        assert (width, height) == tuple(env.options.screen)
    with OSEnv(options=OSOptions(**FAST)) as env:
        assert env.reset(seed=0, task=task)[0].screenshot_png is None
