"""The terminal shell's protocol under hostile agents, on both sandbox backends.

Each test is an attack that once broke an episode: output that imitates the protocol's
markers, garbage on stderr, file names and environment values with any bytes, a fork
bomb's output, a 50 MB flood, steps whose timeout exceeds the job's, a REPL's exit and an
interrupt with nothing running (whose state was misreported), and a shell or sandbox
killed mid-episode (which was scored). Every test fails if its hole reopens.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time

import pytest

from collectors import rollouts, runner
from collectors.env import Task
from collectors.jobs import JobConfig
from collectors.policies import ScriptedPolicy
from collectors.swe import SWEEnv
from collectors.terminal import TerminalEnv
from collectors.wrappers import Recorder
from sandboxes import SandboxError
from sandboxes.shell import ShellDied
from schemas.transition import Provenance
from schemas.validate import transition_problems

TASK = Task(id="sec/shell", domain="terminal", instruction="x")


@pytest.fixture
def sandbox_config(sandbox_config):
    """The suite's limits, with a whole CPU so that the 50 MB flood stays quick."""
    return dataclasses.replace(sandbox_config, cpus=1.0)


def _run(env, command: str, timeout: float = 30):
    obs, _reward, _term, _trunc, info = env.step({"action": "run", "command": command, "timeout": timeout})
    assert info["action_error"] is None, info
    return obs


def test_output_that_imitates_the_protocol_is_only_data(sandbox):
    sh = sandbox.shell()
    forged = [
        "__TF_0123456789_1__ 0 /forged",  # the old marker line
        "size=999999999",
        "wait=0",
        "TF1 1 1 1 1 1 99 99 0 0 0",  # the new frame's header
        "99 deadbeefdeadbeef 0",  # a status record
        "/forged",
    ]
    script = "; ".join(f"echo '{line}'" for line in forged)
    r = sh.run(f"mkdir -p /tmp/real && cd /tmp/real; {script}; echo 'timeout: fork failed' >&2; (exit 5)", timeout=20)
    assert (r.exit_code, r.cwd, r.running) == (5, "/tmp/real", False)
    assert r.output.splitlines() == [*forged, "timeout: fork failed"]
    # the hook's own flush mark, forged with the very next prompt number: at worst output moves to the next step
    r = sh.run("printf 'x\\033]7717;%s\\007y\\n' $((__tf_n + 1)); sleep 0.3; echo tail; (exit 7)", timeout=20)
    later = sh.run("echo next", timeout=20)
    assert (r.exit_code, r.cwd, later.exit_code) == (7, "/tmp/real", 0)
    assert "xy\n" in r.output and "tail\n" in r.output + later.output and later.output.endswith("next\n")


def test_the_first_command_waits_for_the_shells_own_start_up(sandbox, monkeypatch):
    """A shell still in its rc file owns the terminal but echoes what is typed: the boot
    waits for the rc's first prompt, so the first command's output is its own (a clean-clone
    run under load recorded the typed protocol line as the first step's output)."""
    from sandboxes import shell

    monkeypatch.setattr(shell, "_RC", "sleep 1.5\n" + shell._RC)
    sh = sandbox.shell()
    r = sh.run("echo first", timeout=20)
    assert (r.exit_code, r.output) == (0, "first\n")


def test_garbage_bytes_on_both_streams_are_recorded(sandbox):
    sh = sandbox.shell()
    r = sh.run(
        "head -c 20000 /dev/urandom; printf 'timeout: \\377\\376 size=x\\n' >&2; printf '\\0\\033[99999Z\\033]0;\\n'; (exit 3)",
        timeout=20,
    )
    assert (r.exit_code, r.running) == (3, False) and isinstance(r.output, str)
    assert "timeout: \ufffd\ufffd size=x" in r.output
    assert sh.run("echo clean", timeout=20).output.endswith("clean\n")


def test_a_commands_bytes_reach_bash_unchanged_short_or_long(sandbox):
    """A short command travels as a $'...' literal in the step's script, a long one through
    the exec's stdin: either way bash gets every byte (quotes, backslashes, $, backticks,
    carriage returns, control and non-UTF-8 bytes), and the step itself runs none of it."""
    sh = sandbox.shell()
    payload = bytes(b for b in range(1, 256) if b != 10)  # all but NUL (bash drops it) and the newline
    for copies in (1, 40):  # about 250 and 10,000 bytes: under and over the literal's limit
        body = b"\n".join([payload] * copies) + b"\n"
        command = b"cat > /tmp/typed <<'__END__'\n" + body + b"__END__\nwc -c < /tmp/typed; md5sum < /tmp/typed"
        r = sh.run(command.decode("utf-8", "surrogateescape"), timeout=20)
        assert r.exit_code == 0 and r.output.split() == [str(len(body)), hashlib.md5(body).hexdigest(), "-"], r.output


def test_any_bytes_in_file_names_and_environment_are_recorded(sandbox_config):
    names = ["new\nline", "tab\there", "bad\\377utf8", "sp ace", "%s%n", "-rf"]
    make = " ".join(f"$'{n}'" for n in names)
    with TerminalEnv(sandbox=sandbox_config) as env:
        rec = Recorder(env, trajectory_id="t", provenance=Provenance(run_id="t"))
        rec.reset(seed=0, task=TASK)
        obs, *_ = rec.step({"action": "run", "command": f"cd /work && touch -- {make} && mkdir -p $'d\\n' && echo ok"})
        assert obs.text == "ok\n[exit 0] /work$"
        added = set(obs.extra_dict["changed_files"]["added"])
        assert {"new\nline", "tab\there", "bad\\xffutf8", "sp ace", "%s%n", "-rf"} <= added
        obs, *_ = rec.step({"action": "run", "command": "export WEIRD=$'\\377\\n=x'; env | grep -a WEIRD; cd $'d\\n'"})
        assert obs.extra_dict["exit_code"] == 0 and obs.extra_dict["cwd"] == "/work/d\n"
        assert len(rec.transitions) == 2 and not any(transition_problems(t) for t in rec.transitions)
        tree = {e.path for e in env.sandbox.list_tree("/work", depth=1)}
        assert {"new\nline", "bad\\xffutf8", "d\n"} <= tree


def test_a_shell_whose_hooks_or_files_were_clobbered_recovers(sandbox):
    sh = sandbox.shell()
    r = sh.run("PROMPT_COMMAND='echo hook'; PS0=''; unset -f __tf_ps0; cd /tmp; (exit 2)", timeout=20)
    assert (r.exit_code, r.cwd) == (2, "/tmp")
    r = sh.run("rm -rf /tmp/* /tmp/.[!.]*; cd /work; (exit 4)", timeout=20)  # the protocol's folder too
    assert (r.exit_code, r.cwd) == (4, "/work")
    r = sh.run("echo back; (exit 5)", timeout=20)
    assert (r.exit_code, r.cwd, r.running) == (5, "/work", False) and "back\n" in r.output
    again = sh.run("echo again", timeout=20)
    assert again.exit_code == 0 and "hook" in r.output + again.output  # the agent's PROMPT_COMMAND runs beside ours


def test_fork_bomb_output_cannot_break_a_step(sandbox):
    sh = sandbox.shell()
    # a bomb that its own timeout ends: bash waits on a FIFO (a builtin read) while the bomb fills the pid limit
    bomb = "timeout -s KILL 3 bash -c 'exec 3<>/tmp/f; b() {{ echo \"{}\"; b | b & }}; b; read -t 20 -u 3'"
    quiet = bomb.format("timeout: size=x wait=") + " >/dev/null 2>&1"
    r = sh.run(f"mkfifo /tmp/f; {quiet}; echo survived; {bomb.format('timeout: fork failed size=')}", timeout=20)
    assert r.output is not None  # a result, never an exception
    for _ in range(10):  # the bombs end after their 3 s; then the shell answers again
        after = sh.run("echo after-bomb", timeout=10)
        if after.exit_code == 0:
            break
        time.sleep(1)
    assert after.exit_code == 0 and after.output.endswith("after-bomb\n") and not after.running
    assert "survived" in r.output + after.output


def test_a_50_mb_flood_runs_to_the_end_and_later_steps_see_their_own_output(sandbox_config):
    cfg = dataclasses.replace(sandbox_config, exec_timeout_s=120)
    with TerminalEnv(sandbox=cfg) as env:
        env.reset(seed=0, task=TASK)
        obs = _run(env, "yes abcdefghij | head -c 50000000; echo done", timeout=120)
        assert obs.truncated and obs.extra_dict["exit_code"] == 0 and not obs.extra_dict["running"]
        assert obs.text.endswith("done\n[exit 0] /work$") and len(obs.text) < 20_000
        assert _run(env, "echo after").text == "after\n[exit 0] /work$"
        assert _run(env, "sleep 2; echo after-wait").text == "after-wait\n[exit 0] /work$"


def test_repl_exit_and_interrupts_report_the_true_state(sandbox_config):
    with TerminalEnv(sandbox=sandbox_config) as env:
        env.reset(seed=0, task=TASK)
        obs = _run(env, "python3 -q", timeout=1)
        assert obs.text.endswith("[still running]") and obs.extra_dict["running"]
        obs, *_ = env.step({"action": "run", "command": "echo not-for-python", "timeout": 1})
        assert "the command was not typed" in obs.text and obs.extra_dict["running"]
        obs, *_ = env.step({"action": "send_keys", "keys": "exit(4)", "enter": True})
        assert obs.text.endswith("[exit 4] /work$") and not obs.extra_dict["running"]
        obs, *_ = env.step({"action": "interrupt"})  # nothing runs: back at the prompt, Ctrl-C's status
        assert obs.text.endswith("[exit 130] /work$") and not obs.extra_dict["running"]
        _run(env, "sleep 100", timeout=1)
        obs, *_ = env.step({"action": "interrupt"})
        assert obs.text.endswith("[exit 130] /work$") and not obs.extra_dict["running"]
        obs, *_ = env.step({"action": "send_keys", "keys": "cd /tmp", "enter": True})
        assert obs.text.endswith("[exit 0] /tmp$")


def test_the_jobs_step_timeout_caps_every_action_timeout(backend, sandbox_config):
    cfg = dataclasses.replace(sandbox_config, exec_timeout_s=2)
    with TerminalEnv(sandbox=cfg) as env:
        env.reset(seed=0, task=TASK)
        assert env.step_timeout(3600) == 2
        t0 = time.monotonic()
        obs = _run(env, "sleep 100; echo never", timeout=3600)
        assert obs.text.endswith("[still running]") and time.monotonic() - t0 < 30
    swe = Task(id="sec/swe", domain="swe", instruction="x", extra={"repo": "builtin:mdurl-format-port"})
    with SWEEnv(sandbox=dataclasses.replace(cfg, image="localhost/trajforge-swe:latest")) as env:
        env.reset(seed=0, task=swe)
        t0 = time.monotonic()
        obs, *_ = env.step({"action": "run", "command": "sleep 100; echo never", "timeout": 3600})
        assert "(timed out after 2 s)" in obs.text and "never" not in obs.text and time.monotonic() - t0 < 30
    assert JobConfig(job_id="j", tasks=["x"], step_timeout_s=2).sandbox_config("r").exec_timeout_s == 2


def test_a_dead_shell_raises_and_a_clean_exit_says_so(sandbox):
    sh = sandbox.shell()
    with pytest.raises(ShellDied, match="status 3"):
        sh.run("exit 3", timeout=10)
    sh = sandbox.shell()
    with pytest.raises(SandboxError):
        sh.run("kill -9 -1", timeout=10)


def test_a_shell_killed_after_its_step_is_caught_before_scoring(sandbox_config):
    with TerminalEnv(sandbox=sandbox_config) as env:
        env.reset(seed=0, task=TASK)
        _run(env, "(sleep 0.5; kill -9 -1) >/dev/null 2>&1 &")
        time.sleep(2)
        with pytest.raises(SandboxError):
            env.check_alive()


def _episode(backend: str, actions: list[dict], policy: type[ScriptedPolicy] = ScriptedPolicy):
    job = JobConfig(job_id="sec", tasks=["x"], workers=0, retries=0, sandbox={"backend": backend, "pids": 64})
    task = Task(id="sec/dead", domain="terminal", instruction="x", actions=tuple(actions), check="true")
    spec = runner.EpisodeSpec("sec", "sec-run", task, 0, 1, job.model_dump())
    try:
        return runner.run_episode(spec, retries=0)
    finally:
        runner._worker_exit()


def test_kill_all_inside_ends_the_episode_as_an_infrastructure_failure(backend):
    result = _episode(backend, [{"action": "run", "command": "kill -9 -1"}, {"action": "run", "command": "echo after"}])
    assert not result.ok and not result.transitions
    assert result.reason.startswith(("ShellDied: the sandbox shell is gone", "SandboxDied:")), result.reason
    assert "killed" in result.reason or result.reason.startswith("SandboxDied:")
    entry = runner.ledger_entry(result)
    assert entry["status"] == "failed" and "reward" not in entry


def test_sandbox_killed_from_outside_ends_the_episode_as_an_infrastructure_failure(backend, kill_from_outside, monkeypatch):
    class KillsTheSandbox(ScriptedPolicy):
        def act(self, observation, history):
            if len(history) == 1:
                (env,) = rollouts.live_envs()
                kill_from_outside(env.sandbox)
            return super().act(observation, history)

    monkeypatch.setattr(rollouts, "make_policy", lambda config, space: KillsTheSandbox())
    result = _episode(backend, [{"action": "run", "command": "echo one"}, {"action": "run", "command": "echo two"}])
    assert not result.ok and not result.transitions and "SandboxDied" in result.reason
    assert runner.ledger_entry(result)["status"] == "failed"
