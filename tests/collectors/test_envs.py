"""Terminal and SWE environments on both real sandbox backends, and the conformance check."""

from __future__ import annotations

import pytest

from collectors.check_env import check_env
from collectors.env import Task, load_suite
from collectors.swe import SWEEnv
from collectors.swe_tasks import gold_patch, repo_for
from collectors.terminal import TerminalEnv
from sandboxes import SandboxConfig

EXAMPLES = "examples/tasks"


@pytest.fixture
def config(backend):
    image = "localhost/trajforge-swe:latest"
    return SandboxConfig(backend=backend, image=image, memory_mb=512, run_id="pytest-env", exec_timeout_s=30)


@pytest.fixture(scope="module")
def tasks():
    return {t.id: t for path in ("terminal.yaml", "swe.yaml") for t in load_suite(f"{EXAMPLES}/{path}")}


@pytest.mark.parametrize("task_id", ["terminal/count-lines", "terminal/python-script", "swe/mdurl-format-port"])
def test_check_env(config, tasks, task_id):
    cls = SWEEnv if task_id.startswith("swe") else TerminalEnv
    check_env(lambda: cls(sandbox=config), tasks[task_id])


def test_terminal_observation_extra_diff_and_spans(config):
    task = Task(id="t", domain="terminal", instruction="x", files={"/work/a.txt": "1\n"})
    with TerminalEnv(sandbox=config) as env:
        obs, info = env.reset(seed=0, task=task)
        assert obs.text == "[exit 0] /work$" and info["reset_ms"] > 0
        obs, _reward, _term, _trunc, info = env.step({"action": "run", "command": "echo new > b.txt; rm a.txt; date -u"})
        extra = obs.extra_dict
        assert extra["changed_files"] == {"added": ["b.txt"], "modified": [], "deleted": ["a.txt"]}
        assert extra["exit_code"] == 0 and extra["cwd"] == "/work"
        assert any(s.kind == "timestamp" for s in obs.volatile_spans)
        assert obs.text.endswith("[exit 0] /work$") and info["action_error"] is None
        obs, *_ = env.step(
            {"action": "run", "command": "printf '\\033[31mred\\033[0m\\n'; exit_code_is() { return 3; }; exit_code_is"}
        )
        assert obs.text == "red\n[exit 3] /work$"  # ANSI stripped
        obs, *_ = env.step({"action": "run", "command": "seq 1 100000"})
        assert obs.truncated and "[... output truncated ...]" in obs.text
        # the same reset gives a clean sandbox again
        obs, _ = env.reset(seed=0, task=task)
        listing = env.sandbox.exec("ls /work").stdout.split()
        assert "a.txt" in listing and "b.txt" not in listing


def test_terminal_interactive_program_does_not_hang(config):
    with TerminalEnv(sandbox=config) as env:
        env.reset(seed=0, task=Task(id="t", domain="terminal", instruction="x"))
        obs, *_ = env.step({"action": "run", "command": "python3 -q", "timeout": 1})
        assert obs.text.endswith("[still running]") and obs.extra_dict["running"]
        obs, *_ = env.step({"action": "send_keys", "keys": "print(6 * 7)", "enter": True})
        assert "42" in obs.text
        env.step({"action": "interrupt"})
        obs, *_ = env.step({"action": "send_keys", "keys": "exit()", "enter": True})
        obs, *_ = env.step({"action": "run", "command": "echo back"})
        assert obs.text.endswith("back\n[exit 0] /work$")


def test_swe_edits_errors_and_success(config, tasks):
    task = tasks["swe/mdurl-format-port"]
    with SWEEnv(sandbox=config) as env:
        obs, _ = env.reset(seed=0, task=task)
        assert "mdurl/_format.py" in obs.text and "tests/test_mdurl.py" in obs.text
        obs, _, _, _, info = env.step({"action": "run_tests"})
        assert obs.extra_dict["tests"]["ok"] is False and obs.extra_dict["tests"]["failed"] >= 1
        _, _, _, _, info = env.step({"action": "str_replace", "path": "mdurl/_format.py", "old": "nope", "new": "x"})
        assert info["action_error"] == "str_replace: old text occurs 0 times in mdurl/_format.py, expected exactly once"
        _, _, _, _, info = env.step({"action": "view", "path": "../../etc/passwd"})
        assert "outside the repository" in info["action_error"]
        _, _, _, _, info = env.step({"action": "view", "path": "missing.py"})
        assert info["action_error"] == "view: missing.py: no such file"
        # a sparse file claiming 64 GiB: the editor refuses it, and reads 8 MiB of it at most
        assert env.sandbox.exec("truncate -s 64G huge.py", cwd="/work/repo").exit_code == 0
        _, _, _, _, info = env.step({"action": "str_replace", "path": "huge.py", "old": "a", "new": "b"})
        assert info["action_error"] == "str_replace: huge.py is larger than 8 MiB: the editor does not open it"
        env.sandbox.exec("rm huge.py", cwd="/work/repo")
        patch = gold_patch(task.extra["repo"])
        env.sandbox.write_file("/tmp/gold.patch", patch)
        assert env.sandbox.exec("git apply /tmp/gold.patch", cwd="/work/repo").exit_code == 0
        obs, reward, terminated, _, _ = env.step({"action": "submit"})
        assert reward == 1.0 and terminated and "Tests passed" in obs.text
        assert "mdurl/_format.py | 2 +-" in obs.extra_dict["diff_stat"]


def test_builtin_repos_are_real_git_repos_at_a_broken_commit():
    repo = repo_for("builtin:mdurl-format-ipv6")
    assert (repo / ".git").is_dir() and (repo / "mdurl" / "_parse.py").is_file()
    assert "result += url.hostname" in (repo / "mdurl" / "_format.py").read_text()
    assert "[" in gold_patch("builtin:mdurl-format-ipv6")
