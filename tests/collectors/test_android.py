"""The Android environment against simulated devices (collectors/android/sim) through the
real adb server (Debian's adb, on a private port) and adbutils: conformance, scripted tasks
that reach their checks, the compact tree and exact adb commands recorded, bad actions as
data, dump retries with backoff, a device killed mid-episode (typed error, retried by the
runner), exploration, two workers on two devices, and the example job through the CLI."""

from __future__ import annotations

import itertools
import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest

from collectors import rollouts, runner
from collectors.android.adb import DeviceOffline, DumpError, adb
from collectors.android.env import AndroidEnv
from collectors.android.sim import Simulator
from collectors.check_env import check_env
from collectors.env import Task, load_suite
from collectors.policies import ExplorationPolicy
from collectors.runner import EpisodeSpec, run_episode
from collectors.wrappers import Recorder
from schemas.transition import Provenance
from tests.conftest import cli

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
TASKS = {t.id: t for t in load_suite(ROOT / "examples" / "tasks" / "android.yaml")}
SIM = {"simulator": True, "dump_backoff_s": 0.05}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", autouse=True)
def adb_server():
    """A private adb server for this module (never the default one on 5037); killed at the end."""
    port = _free_port()
    old = os.environ.get("ANDROID_ADB_SERVER_PORT")
    os.environ["ANDROID_ADB_SERVER_PORT"] = str(port)
    adb(port, "start-server")
    yield port
    adb(port, "kill-server")
    if old is None:
        os.environ.pop("ANDROID_ADB_SERVER_PORT", None)
    else:
        os.environ["ANDROID_ADB_SERVER_PORT"] = old


@pytest.fixture(scope="module")
def env(adb_server):
    with AndroidEnv(options=SIM) as e:
        yield e


def test_check_env_conformance():
    check_env(lambda: AndroidEnv(options=SIM), TASKS["android/contacts-add-grace"])


@pytest.mark.parametrize("task_id", sorted(TASKS))
def test_scripted_tasks_reach_their_check_with_tree_and_commands_recorded(env, task_id):
    task = TASKS[task_id]
    rec = Recorder(env, trajectory_id=task_id, provenance=Provenance(run_id="test"))
    obs, _ = rec.reset(seed=0, task=task)
    assert obs.format == "uiautomator_xml" and obs.text.startswith("Package: com.android.launcher3  Activity: .Launcher")
    assert env.check_task(task)[0] == 0.0
    infos = []
    for action in task.actions:
        *_, info = rec.step(action)
        assert info["action_error"] is None, (action, info["action_error"])
        infos.append(info)
    assert env.check_task(task) == (1.0, "ok")
    steps = rec.transitions
    assert steps[-1].terminated and len(steps) == len(task.actions)
    assert all(t.next_state.text == u.state.text for t, u in itertools.pairwise(steps))
    first = steps[0].next_state
    pkg = task.extra["apps"][0]
    assert first.text.startswith(f"Package: {pkg}  Activity: .") and "Screen: 1080x2400 portrait" in first.text
    extra = first.extra_dict
    assert extra["ui_method"] == "uiautomator_dump" and extra["package"] == pkg and extra["dump_attempts"] == 1
    assert infos[0]["adb_commands"] == [f"pm path {pkg}", f"monkey -p {pkg} -c android.intent.category.LAUNCHER 1"]
    assert extra["adb_commands"][:2] == infos[0]["adb_commands"]
    assert "uiautomator dump /sdcard/window_dump.xml >/dev/null && cat /sdcard/window_dump.xml" in extra["adb_commands"]
    assert any(c.startswith("input ") for i in infos for c in i["adb_commands"])
    env.reset(seed=0, task=task)  # cleared apps and setup again: not done yet
    assert env.check_task(task)[0] == 0.0


def test_bad_actions_are_data(env):
    obs, _ = env.reset(task=TASKS["android/settings-airplane-on"])
    for action, error in [
        ({"action": "click", "index": 99}, "no node with index 99 (the screen has 5)"),
        ({"action": "open_app", "app_name": "Chess"}, "app 'Chess' is not installed"),
        ({"action": "click", "x": 5000, "y": 10}, "(5000, 10) is off the screen (1080x2400)"),
        ({"action": "scroll", "direction": "sideways"}, "scroll.direction: expected one of"),
        ({"action": "click"}, "give either index or both x and y"),
    ]:
        after, reward, terminated, _, info = env.step(action)
        assert error in info["action_error"] and after == obs and not terminated and reward is None


def test_a_failing_dump_is_retried_with_backoff_then_fails_clearly(env):
    env.reset(task=TASKS["android/settings-airplane-on"])
    env.device.shell("setprop debug.sim.dump_fail 2")
    t0 = time.monotonic()
    obs, _, _, _, info = env.step({"action": "open_app", "app_name": "Settings"})
    assert info["action_error"] is None and obs.extra_dict["dump_attempts"] == 3 and "Airplane mode" in obs.text
    assert time.monotonic() - t0 >= 0.05 + 0.1  # backoff 0.05 s, then 0.1 s
    env.device.shell("setprop debug.sim.dump_fail 10")
    with pytest.raises(DumpError, match=r"uiautomator dump failed 4 times: 'ERROR: could not get idle state.'"):
        env.step({"action": "navigate_back"})
    env.device.shell("setprop debug.sim.dump_fail 0")


def test_a_device_killed_mid_episode_is_a_typed_error_and_the_runner_retries(adb_server):
    with AndroidEnv(options=SIM) as e:
        e.reset(task=TASKS["android/settings-airplane-on"])
        e.sim.kill()
        with pytest.raises(DeviceOffline, match=r"device 127\.0\.0\.1:\d+ is offline or gone"):
            e.step({"action": "navigate_home"})
    killed = []

    def kill_once() -> None:  # the first attempt's device dies once its episode is under way
        while not killed:
            env = next((e for e in rollouts.live_envs() if getattr(e, "domain", "") == "android"), None)
            if env is not None and env.observation is not None and env.sim is not None:
                env.sim.kill()
                killed.append(env.sim.serial)
            time.sleep(0.02)

    task = TASKS["android/settings-airplane-on"]
    task = Task(**{**task.__dict__, "id": "android/dies-once", "actions": ({"action": "wait", "seconds": 0.5}, *task.actions)})
    spec = EpisodeSpec("android-test", "run", task, 0, 0, {"job_id": "android-test", "tasks": ["x"], "android": SIM})
    threading.Thread(target=kill_once, daemon=True).start()
    try:
        result = run_episode(spec, retries=1)
    finally:
        runner._worker_exit()
    assert killed and result.ok and result.attempts == 2, result
    assert "DeviceOffline" in result.retried_after[0] and result.transitions[-1].reward == 1.0
    assert json.loads(result.transitions[0].provenance.extra)["serial"] != killed[0]  # a fresh device
    gone = {"job_id": "t", "tasks": ["x"], "android": {"serials": [killed[0]]}}
    failed = run_episode(EpisodeSpec("t", "run", task, 0, 0, gone), retries=1)
    assert not failed.ok and failed.attempts == 2 and "DeviceOffline: device" in failed.reason


def test_exploration_mostly_acts_on_real_elements(env):
    task = TASKS["android/contacts-add-grace"]
    policy = ExplorationPolicy(max_steps=12)
    policy.reset(task, seed=5)
    obs, _ = env.reset(seed=5, task=task)
    errors, kinds, screens = 0, [], set()
    while (action := policy.act(obs, [])) is not None:
        obs, _, _, _, info = env.step(action)
        errors += info["action_error"] is not None
        kinds.append(action["action"])
        screens.add(obs.extra_dict["activity"])
    assert len(kinds) == 12 and errors <= 2, (kinds, errors)
    assert "click" in kinds and len(screens) >= 2


def test_two_workers_on_two_devices_in_parallel(tmp_path, adb_server):
    with Simulator.start(adb_server) as a, Simulator.start(adb_server) as b:
        job = tmp_path / "job.yaml"
        job.write_text(
            json.dumps(
                {
                    "job_id": "two-devices",
                    "tasks": [str(ROOT / "examples" / "tasks" / "android.yaml")],
                    "workers": 2,
                    "episodes_per_task": 2,
                    "retries": 0,
                    "android": {"serials": [a.serial, b.serial], "adb_port": adb_server},
                }
            )
        )
        out = cli("collect", str(job), "--store", str(tmp_path / "store"))
        assert "6 episodes collected" in out.stdout and "0 failed" in out.stdout
    serial = "json_extract_string(provenance.extra, '$.serial')"
    sql = (
        f"SELECT trajectory_id, max(reward) AS reward, min({serial}) AS serial, count(DISTINCT {serial}) AS serials "
        "FROM transitions GROUP BY 1"
    )
    rows = [json.loads(x) for x in cli("query", sql, "--store", str(tmp_path / "store"), "--format", "json").stdout.splitlines()]
    assert len(rows) == 6 and all(r["reward"] == 1.0 and r["serials"] == 1 for r in rows)
    assert {r["serial"] for r in rows} == {a.serial, b.serial}  # each worker on its own device


def test_example_job_collects_every_task_through_the_cli(tmp_path):
    store = tmp_path / "store"
    out = cli("collect", str(ROOT / "examples" / "jobs" / "android-sim.yaml"), "--store", str(store))
    assert f"{len(TASKS)} episodes collected" in out.stdout and "0 failed" in out.stdout
    sql = "SELECT task_id, max(reward) AS reward, count(*) AS steps, min(state.format) AS fmt FROM transitions GROUP BY 1"
    rows = [json.loads(x) for x in cli("query", sql, "--store", str(store), "--format", "json").stdout.splitlines()]
    assert {r["task_id"]: (r["reward"], r["steps"], r["fmt"]) for r in rows} == {
        t: (1.0, len(task.actions), "uiautomator_xml") for t, task in TASKS.items()
    }
