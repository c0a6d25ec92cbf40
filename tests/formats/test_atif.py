"""ATIF in and out: Harbor's own files import field by field, malformed records are
skipped and named, re-imports add nothing, a killed import resumes, and our exports pass
the spec's rules and import back unchanged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from formats.exporter import export_store
from formats.importer import import_files
from pipelines.query import run_query
from schemas.errors import ConfigError
from tests.conftest import cli

ROWS = (
    "SELECT trajectory_id AS tid, step, domain, task_id, instruction, state.text AS state, action.kind AS kind,"
    " action.canonical AS action, next_state.text AS obs, next_state.format AS obs_format, reward, terminated, truncated,"
    " action_error, content_hash AS hash, CAST(next_state.volatile_spans AS VARCHAR) AS spans,"
    " provenance.origin AS origin, provenance.executed AS executed, provenance.source AS source,"
    " provenance.source_format AS fmt, provenance.source_file AS file, provenance.source_record AS record,"
    " provenance.license AS license, provenance.agent AS agent, provenance.model AS model"
    " FROM transitions ORDER BY file, tid, step"
)


def rows(store) -> list[dict]:
    return run_query(ROWS, str(store)).to_pylist()


def test_harbor_files_import_field_by_field(agent_data, tmp_path):
    s = import_files("atif", [agent_data / "atif"], tmp_path, source="harbor-goldens", license="Apache-2.0")
    assert (s.files, s.records, s.trajectories, s.transitions, s.malformed) == (2, 2, 2, 6, 0)
    got = rows(tmp_path)
    assert {r["origin"] for r in got} == {"imported"} and {r["executed"] for r in got} == {"executed"}
    assert {(r["source"], r["fmt"], r["license"], r["record"]) for r in got} == {
        ("harbor-goldens", "atif", "Apache-2.0", "NORMALIZED_SESSION_ID")
    }
    openhands = [r for r in got if r["file"] == "hello-world.trajectory.json"]
    assert [r["kind"] for r in openhands] == ["create", "finish"]
    assert json.loads(openhands[0]["action"]) == {"kind": "create", "path": "/app/hello.txt", "content": "Hello, world!"}
    assert openhands[0]["obs"] == "File created successfully at: /app/hello.txt"
    assert openhands[0]["instruction"].startswith('Create a file called hello.txt with "Hello, world!"')
    assert openhands[0]["state"] == openhands[0]["instruction"]  # the user's message is the first state
    assert openhands[1]["state"] == openhands[0]["obs"] and openhands[1]["terminated"]
    assert {r["domain"] for r in openhands} == {"swe"} and openhands[0]["agent"] == "openhands/1.0.0"
    terminus = [r for r in got if r["file"] == "hello-world-invalid-json.trajectory.json"]
    assert [r["kind"] for r in terminus] == ["message", "send_keys", "finish", "finish"]
    assert terminus[0]["obs"].startswith("Previous response had parsing errors")  # an agent turn with no tool call
    # Terminus' first prompt: its task is the instruction, the screen it shows the first state
    assert terminus[0]["instruction"] == 'Create a file called hello.txt with "Hello, world!" as the content.'
    assert terminus[0]["state"].startswith("Current Terminal Screen:\nbash: cannot set terminal process group")
    assert json.loads(terminus[1]["action"]) == {
        "kind": "send_keys",
        "keys": "printf 'Hello, world!\\n' > hello.txt",
        "enter": True,
        "special": False,
    }
    assert "printf 'Hello, world!" in terminus[1]["obs"]
    assert {r["domain"] for r in terminus} == {"terminal"}
    assert (terminus[0]["agent"], terminus[0]["model"]) == ("terminus-2/2.0.0", "openai/gpt-4o")
    # both files carry the same session id: two records, two trajectories
    assert len({r["tid"] for r in got}) == 2


def test_reimport_adds_nothing_and_ids_are_stable(agent_data, tmp_path):
    first = import_files("atif", [agent_data / "atif"], tmp_path / "a", source="goldens")
    again = import_files("atif", [agent_data / "atif"], tmp_path / "a", source="goldens")
    assert (again.trajectories, again.already_imported) == (0, 2)
    other = import_files("atif", [agent_data / "atif"], tmp_path / "b", source="goldens")
    assert first.transitions == other.transitions == len(rows(tmp_path / "a")) == 6
    assert [r["tid"] for r in rows(tmp_path / "a")] == [r["tid"] for r in rows(tmp_path / "b")]


def test_ids_come_from_what_a_record_holds_not_how_it_is_spelled(tmp_path):
    call = [{"tool_call_id": "a", "function_name": "bash", "arguments": {"command": "ls"}}]
    one = _record("s1", call, [{"source_call_id": "a", "content": "x.txt"}])
    (tmp_path / "a.jsonl").write_text(json.dumps(one) + "\n")
    first = import_files("atif", [tmp_path / "a.jsonl"], tmp_path / "st", source="probe")
    # the same record pretty-printed, in a JSON array, with its keys in another order, and
    # imported with other options: nothing new
    (tmp_path / "b.json").write_text(json.dumps([dict(reversed(one.items()))], indent=2))
    again = import_files("atif", [tmp_path / "b.json"], tmp_path / "st", source="probe", executed="unknown", domain="swe")
    assert (first.trajectories, again.trajectories, again.already_imported) == (1, 0, 1)
    # the same session id with another observation, another model, another outcome: each its own trajectory
    other_obs = _record("s1", call, [{"source_call_id": "a", "content": "y.txt"}])
    other_model = one | {"agent": {"name": "probe", "version": "1", "model_name": "m2"}}
    other_reward = json.loads(json.dumps(one))
    other_reward["steps"][1]["extra"] = {"trajforge": {"reward": 1.0}}
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (other_obs, other_model, other_reward)))
    more = import_files("atif", [tmp_path / "c.jsonl"], tmp_path / "st", source="probe")
    assert (more.trajectories, more.already_imported) == (3, 0)
    assert len({r["tid"] for r in rows(tmp_path / "st")}) == 4


def _record(session: str, calls: list, results: list, **more) -> dict:
    return {
        "schema_version": "ATIF-v1.2",
        "session_id": session,
        "agent": {"name": "probe", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "list the files"},
            {"step_id": 2, "source": "agent", "message": "", "tool_calls": calls, "observation": {"results": results}},
            *more.get("after", []),
        ],
    }


def test_parallel_calls_get_their_own_results(tmp_path):
    calls = [
        {"tool_call_id": "a", "function_name": "bash", "arguments": {"command": "ls"}},
        {"tool_call_id": "b", "function_name": "weather", "arguments": {"city": "Oslo"}},
    ]
    results = [{"source_call_id": "b", "content": "rain"}, {"source_call_id": "a", "content": "x.txt"}, {"content": "note"}]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_record("s1", calls, results)))
    import_files("atif", [path], tmp_path / "st", source="probe")
    got = rows(tmp_path / "st")
    assert [(r["kind"], r["obs"]) for r in got] == [("run", "x.txt"), ("call_tool", "rain\nnote")]
    assert json.loads(got[1]["action"]) == {"kind": "call_tool", "name": "weather", "arguments": {"city": "Oslo"}}
    assert got[1]["state"] == "x.txt" and got[0]["domain"] == "mcp"


def test_a_result_naming_no_call_of_its_step_is_kept(tmp_path):
    """A result whose ``source_call_id`` names a call its step does not make (a producer's
    renumbered or stale id) is the step's, as one naming none is: never dropped. A call
    whose ``arguments`` is null takes none."""
    calls = [
        {"tool_call_id": "a", "function_name": "bash", "arguments": {"command": "ls"}},
        {"tool_call_id": "b", "function_name": "get_time", "arguments": None},
    ]
    results = [{"source_call_id": "a", "content": "x.txt"}, {"source_call_id": "call_9", "content": "12:00"}]
    path = tmp_path / "o.json"
    path.write_text(json.dumps(_record("s2", calls, results)))
    summary = import_files("atif", [path], tmp_path / "st", source="probe")
    assert summary.malformed == 0
    got = rows(tmp_path / "st")
    assert [(r["kind"], r["obs"]) for r in got] == [("run", "x.txt"), ("call_tool", "12:00")]
    assert json.loads(got[1]["action"]) == {"kind": "call_tool", "name": "get_time", "arguments": {}}


def test_what_a_system_step_observed_is_kept(tmp_path):
    """v1.2: a system step may carry an observation (a context summary, a reset, a
    delegation); it rides, with the step's message, in the next agent step's ``before``."""
    call = [{"tool_call_id": "a", "function_name": "bash", "arguments": {"command": "ls"}}]
    system = {
        "step_id": 3,
        "source": "system",
        "message": "context compacted",
        "observation": {"results": [{"content": "summary: listed the files"}]},
    }
    after = {
        "step_id": 4,
        "source": "agent",
        "message": "",
        "tool_calls": [{"tool_call_id": "b", "function_name": "bash", "arguments": {"command": "pwd"}}],
        "observation": {"results": [{"source_call_id": "b", "content": "/app"}]},
    }
    doc = _record("sys", call, [{"source_call_id": "a", "content": "x.txt"}], after=[system, after])
    (tmp_path / "s.json").write_text(json.dumps(doc))
    import_files("atif", [tmp_path / "s.json"], tmp_path / "st", source="probe")
    got = run_query("SELECT step, next_state.extra AS extra FROM transitions ORDER BY step", str(tmp_path / "st")).to_pylist()
    assert [json.loads(r["extra"]) for r in got] == [
        {},
        {"before": [{"source": "system", "message": "context compacted", "observation": "summary: listed the files"}]},
    ]


def test_malformed_records_are_skipped_and_named(tmp_path):
    good = _record("ok", [{"tool_call_id": "a", "function_name": "bash", "arguments": {"command": "ls"}}], [{"content": "a.txt"}])
    bad_step_id = json.loads(json.dumps(good)) | {"session_id": "bad-id"}
    bad_step_id["steps"][1]["step_id"] = "two"
    no_name = json.loads(json.dumps(good)) | {"session_id": "no-name"}
    del no_name["steps"][1]["tool_calls"][0]["function_name"]
    no_session = json.loads(json.dumps(good))
    del no_session["session_id"]
    lines = [json.dumps(good), json.dumps(bad_step_id), '{"steps": 3}', json.dumps(no_name), "[1, 2", json.dumps([1])]
    lines.append(json.dumps(no_session))
    (tmp_path / "runs.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "cut.json").write_text(json.dumps(good)[:-40])  # truncated
    (tmp_path / "array.json").write_text("[" + json.dumps(good) + ", " + json.dumps(good)[:50])  # a cut array
    s = import_files("atif", [tmp_path], tmp_path / "st", source="probe")
    # the good line, and the array's whole first item: the same record again, so already imported; 6 + 1 + 1 bad
    assert (s.trajectories, s.already_imported, s.malformed) == (1, 1, 8)
    said = [str(p) for p in s.problems]
    assert any("runs.jsonl: line 2: steps[1].step_id: 'two' is not an integer from 1" in p for p in said), said
    assert any("runs.jsonl: line 3: steps: missing or not a list" in p for p in said), said
    assert any("runs.jsonl: line 4: steps[1].tool_calls[0].function_name: missing" in p for p in said), said
    assert any("runs.jsonl: line 5: not JSON" in p for p in said) and any("line 6: expected a JSON object" in p for p in said)
    assert any("runs.jsonl: line 7: session_id: missing" in p for p in said), said
    assert any("cut.json: record: not JSON" in p for p in said) and any("array.json: item 1: not JSON" in p for p in said)
    with pytest.raises(ConfigError, match=r"runs.jsonl: line 2: steps\[1\].step_id"):
        import_files("atif", [tmp_path / "runs.jsonl"], tmp_path / "st2", source="probe", strict=True)
    r = cli(
        "import", "atif", str(tmp_path / "runs.jsonl"), "--store", str(tmp_path / "st3"), "--source", "p", "--strict", check=False
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.startswith("error: ")


def _check_atif_rules(doc: dict) -> None:
    """The spec's rules (RFC 0001): schema_version set; step_id 1, 2, ...; sources known; each
    source_call_id names a tool call of its own step; tool calls have id, name, object args."""
    assert doc["schema_version"].startswith("ATIF-v") and isinstance(doc["session_id"], str)
    assert isinstance(doc["agent"]["name"], str) and isinstance(doc["agent"]["version"], str)
    assert [s["step_id"] for s in doc["steps"]] == list(range(1, len(doc["steps"]) + 1))
    for s in doc["steps"]:
        assert s["source"] in ("system", "user", "agent") and isinstance(s["message"], str)
        ids = {c["tool_call_id"] for c in s.get("tool_calls", [])}
        for c in s.get("tool_calls", []):
            assert isinstance(c["function_name"], str) and isinstance(c["arguments"], dict)
        for r in s.get("observation", {}).get("results", []):
            assert r.get("source_call_id") is None or r["source_call_id"] in ids


def test_round_trip_keeps_every_field_both_sides_hold(agent_data, tmp_path):
    from collectors.synth import synth_store
    from pipelines.store import Store

    import_files("atif", [agent_data / "atif"], tmp_path / "a", source="goldens", license="Apache-2.0")
    synth_store(Store.open(str(tmp_path / "a"), must_exist=False), transitions=60, seed=3)  # collected data exports too
    s = export_store("atif", tmp_path / "a", tmp_path / "out")
    assert s.trajectories == s.files and s.trajectories > 2
    for path in (tmp_path / "out").glob("*.json"):
        _check_atif_rules(json.loads(path.read_text()))
    import_files("atif", [tmp_path / "out"], tmp_path / "b", source="again")
    kept = ("step", "domain", "task_id", "instruction", "state", "kind", "action", "obs", "reward", "terminated", "action_error")
    kept += ("hash", "spans")  # a collector's spans (a process id no detector finds) read back: the same content hash
    before = sorted(tuple(r[k] for k in kept) for r in rows(tmp_path / "a"))
    after = sorted(tuple(r[k] for k in kept) for r in rows(tmp_path / "b"))
    assert before == after
    assert {r["executed"] for r in rows(tmp_path / "b")} == {"executed"}
    # --where picks trajectories
    s = export_store("atif", tmp_path / "a", tmp_path / "some", where="provenance.origin = 'imported'")
    assert s.trajectories == 2


def test_a_killed_import_resumes_without_duplicates(agent_data, tmp_path):
    base = json.loads((agent_data / "atif" / "hello-world.trajectory.json").read_text())
    n = 6000
    with open(tmp_path / "many.jsonl", "w") as f:
        for i in range(n):
            f.write(json.dumps(base | {"session_id": f"s-{i}"}) + "\n")
    cmd = [
        sys.executable,
        "trajforge.py",
        "import",
        "atif",
        str(tmp_path / "many.jsonl"),
        "--store",
        str(tmp_path / "st"),
        "--source",
        "big",
    ]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    run = tmp_path / "st" / "raw" / "swe" / "import-big"
    while time.monotonic() < deadline and not any(run.glob("*.arrow*")):
        time.sleep(0.05)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    resumed = import_files("atif", [tmp_path / "many.jsonl"], tmp_path / "st", source="big")
    assert resumed.already_imported > 0 and resumed.trajectories > 0  # it was killed midway
    got = run_query("SELECT count(*) AS n, count(DISTINCT trajectory_id) AS t FROM transitions", str(tmp_path / "st")).to_pylist()
    assert got == [{"n": 2 * n, "t": n}]


def test_a_harbor_jobs_folder_with_its_trials_rewards(agent_data, tmp_path):
    """A jobs folder as Harbor writes it: each trial folder is one record (its
    ``agent/trajectory*.json`` files, the verifier's reward from ``result.json`` on the
    run's last segment, the trial's task); Harbor's own job and trial files are skipped,
    the agent's other logs are not read."""
    golden = json.loads((agent_data / "atif" / "hello-world.trajectory.json").read_text())
    terminus = json.loads((agent_data / "atif" / "hello-world-invalid-json.trajectory.json").read_text())
    job = tmp_path / "jobs" / "job-1"

    def write(path, value):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))

    write(job / "config.json", {"job_name": "job-1", "n_attempts": 1, "agents": [{"name": "terminus-2"}]})
    write(job / "result.json", {"id": "0b1c", "n_total_trials": 2, "stats": {"n_trials": 2, "n_errors": 0}})
    for trial, rewards, files in [
        ("hello-world__A1b2", {"reward": 1.0}, {"trajectory.json": golden}),
        (
            "hello-world__C3d4",
            {"accuracy": 0.0},
            {
                "trajectory.json": terminus | {"continued_trajectory_ref": "trajectory.cont-1.json"},
                "trajectory.cont-1.json": golden | {"session_id": "cont-1"},
            },
        ),
    ]:
        write(job / trial / "config.json", {"trial_name": trial, "task": {"path": "tasks/hello-world"}})
        result = {"task_name": "hello-world", "trial_name": trial, "trial_uri": f"file:///jobs/job-1/{trial}"}
        write(job / trial / "result.json", result | {"verifier_result": {"rewards": rewards}})
        for name, trajectory in files.items():
            write(job / trial / "agent" / name, trajectory)
        write(job / trial / "agent" / "episode-0" / "debug.json", {"litellm": "not a trajectory"})
        (job / trial / "verifier").mkdir()
        (job / trial / "verifier" / "reward.txt").write_text("1")
    s = import_files("atif", [tmp_path / "jobs"], tmp_path / "st", source="tb-run")
    assert (s.files, s.records, s.empty, s.malformed, s.trajectories) == (4, 4, 2, 0, 3), [str(p) for p in s.problems]
    got = rows(tmp_path / "st")
    assert {r["task_id"] for r in got} == {"hello-world"}
    outcome = {(r["file"], r["record"]): r["reward"] for r in got if r["terminated"]}
    assert outcome == {
        ("hello-world__A1b2", "NORMALIZED_SESSION_ID"): 1.0,
        ("hello-world__C3d4", "NORMALIZED_SESSION_ID"): None,  # continued in the next file
        ("hello-world__C3d4", "cont-1"): 0.0,  # the verifier's only number
    }
    assert {r["reward"] for r in got if not r["terminated"]} == {None}
    again = import_files("atif", [tmp_path / "jobs"], tmp_path / "st", source="tb-run")
    assert (again.trajectories, again.already_imported) == (0, 3)


@pytest.mark.parametrize("step_id", [-1, 0, "²", "-3", True])
def test_a_step_id_is_an_integer_from_1(agent_data, tmp_path, step_id):
    record = json.loads((agent_data / "atif" / "hello-world.trajectory.json").read_text())
    record["steps"][1]["step_id"] = step_id
    (tmp_path / "run.json").write_text(json.dumps(record))
    s = import_files("atif", [tmp_path / "run.json"], tmp_path / "st", source="ids")
    assert s.trajectories == 0 and [p.reason for p in s.problems] == [f"steps[1].step_id: {step_id!r} is not an integer from 1"]


def test_what_the_agent_says_and_the_user_replies_are_atif_turns(tmp_path):
    """A conversation's said turns (a ``message`` action, the user's reply its next state)
    are exported as an agent step with that message and a user step with the reply, not as
    a tool call named ``message``; they import back as the same transitions."""
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})}}
    talk = [
        {"role": "user", "content": "Clean the folder"},
        {"role": "assistant", "content": "Which folder?"},
        {"role": "user", "content": "The build folder."},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.o b.o"},
    ]
    (tmp_path / "talk.jsonl").write_text(json.dumps({"id": "t1", "messages": talk}) + "\n")
    import_files("openai-messages", [tmp_path / "talk.jsonl"], tmp_path / "a", source="chat")
    export_store("atif", tmp_path / "a", tmp_path / "out")
    [doc] = [json.loads(p.read_text()) for p in (tmp_path / "out").glob("*.json")]
    _check_atif_rules(doc)
    assert [(s["source"], s["message"], "tool_calls" in s) for s in doc["steps"]] == [
        ("user", "Clean the folder", False),
        ("agent", "Which folder?", False),
        ("user", "The build folder.", False),
        ("agent", "", True),
    ]
    import_files("atif", [tmp_path / "out"], tmp_path / "b", source="again")
    kept = ("step", "state", "kind", "action", "obs", "terminated")
    assert [tuple(r[k] for k in kept) for r in rows(tmp_path / "b")] == [tuple(r[k] for k in kept) for r in rows(tmp_path / "a")]
    assert [r["obs"] for r in rows(tmp_path / "b")] == ["The build folder.", "a.o b.o"]
    # and the other formats: the assistant's words and the user's reply; ADP's message_action
    export_store("openai-messages", tmp_path / "a", tmp_path / "out")
    [line] = (tmp_path / "out" / "openai-messages.jsonl").read_text().splitlines()
    said = [(m["role"], m.get("content")) for m in json.loads(line)["messages"]][:3]
    assert said == [("user", "Clean the folder"), ("assistant", "Which folder?"), ("user", "The build folder.")]
    export_store("adp", tmp_path / "a", tmp_path / "out")
    [line] = (tmp_path / "out" / "adp.jsonl").read_text().splitlines()
    items = json.loads(line)["content"]
    assert [(i["class_"], i.get("content"), i.get("source")) for i in items[1:3]] == [
        ("message_action", "Which folder?", None),
        ("text_observation", "The build folder.", "user"),
    ]
    assert items[3]["class_"] == "code_action" and items[3]["content"] == "ls"
    for fmt in ("openai-messages", "adp"):
        import_files(fmt, [tmp_path / "out" / f"{fmt}.jsonl"], tmp_path / fmt, source="again")
        assert [tuple(r[k] for k in kept) for r in rows(tmp_path / fmt)] == [
            tuple(r[k] for k in kept) for r in rows(tmp_path / "a")
        ]


def test_a_call_no_result_answers_is_no_transition_and_a_page_in_extra_web_is_read(tmp_path):
    """As in the other formats, a call no result answers has no next state and makes no
    transition (a finish needs none). ADP's ATIF export keeps a web page in a result's
    ``extra.web`` (its accessibility tree, else its HTML), with empty ``content``."""
    calls = [
        {"tool_call_id": "a", "function_name": "bash", "arguments": {"command": "ls"}},
        {"tool_call_id": "b", "function_name": "weather", "arguments": {"city": "Oslo"}},  # nothing answers it
    ]
    page = {"content": "", "source_call_id": "c", "extra": {"web": {"html": None, "axtree": "[1] link 'Features'"}}}
    more = [
        {
            "step_id": 3,
            "source": "agent",
            "message": "",
            "tool_calls": [{"tool_call_id": "c", "function_name": "click", "arguments": {"bid": "1"}}],
            "observation": {"results": [page]},
        },
        {
            "step_id": 4,
            "source": "agent",
            "message": "",
            "tool_calls": [{"tool_call_id": "d", "function_name": "go", "arguments": {}}],
        },
        {
            "step_id": 5,
            "source": "agent",
            "message": "",
            "tool_calls": [{"tool_call_id": "e", "function_name": "finish", "arguments": {}}],
        },
    ]
    (tmp_path / "p.json").write_text(json.dumps(_record("s1", calls, [{"source_call_id": "a", "content": "x.txt"}], after=more)))
    s = import_files("atif", [tmp_path / "p.json"], tmp_path / "st", source="probe")
    assert (s.trajectories, s.transitions, s.malformed) == (1, 3, 0)
    got = rows(tmp_path / "st")
    assert [(r["kind"], r["obs"]) for r in got] == [("run", "x.txt"), ("call_tool", "[1] link 'Features'"), ("finish", "")]


def test_what_is_observed_with_no_action_is_the_first_state_or_more_of_the_last_outcome(tmp_path):
    """ADP's ATIF export writes an observation no action came before (the first page, or
    a second observation after an action's) as an agent step with no message and no call:
    it is part of the first state, or of what followed the last action, never an invented
    empty message."""

    def seen(n: int, text: str) -> dict:
        return {"step_id": n, "source": "agent", "message": "", "observation": {"results": [{"content": text}]}}

    click = {"tool_call_id": "c", "function_name": "click", "arguments": {"bid": "7"}}
    steps = [
        {"step_id": 1, "source": "user", "message": "Open the features page"},
        seen(2, "[7] link 'Features'"),
        {
            "step_id": 3,
            "source": "agent",
            "message": "",
            "tool_calls": [click],
            "observation": {"results": [{"content": "page 2"}]},
        },
        seen(4, "a popup"),
    ]
    doc = {"schema_version": "ATIF-v1.7", "session_id": "w", "agent": {"name": "adp", "version": "1"}, "steps": steps}
    (tmp_path / "w.json").write_text(json.dumps(doc))
    assert import_files("atif", [tmp_path / "w.json"], tmp_path / "st", source="probe").transitions == 1
    [only] = rows(tmp_path / "st")
    assert (only["kind"], only["state"], only["obs"]) == (
        "call_tool",
        "Open the features page\n\n[7] link 'Features'",
        "page 2\na popup",
    )
    assert only["instruction"] == "Open the features page"


def test_terminus_keystrokes_typed_in_turn_are_one_action(tmp_path):
    """Terminus types a reply's commands in turn and shows one screen after them all:
    several ``bash_command`` calls of a step whose results name none are one ``send_keys``
    of all their keys. A reply kept only as its text (Harbor writes Terminus 2's so with
    its JSON parser) is read as Terminus runs it: its keystrokes, or a finish, or a wait;
    one missing the fields Terminus requires ran nothing, and stays a message."""
    calls = [
        {"tool_call_id": "1", "function_name": "bash_command", "arguments": {"keystrokes": "cd /app\n", "duration": 0.1}},
        {"tool_call_id": "2", "function_name": "bash_command", "arguments": {"keystrokes": "ls\n", "duration": 0.1}},
    ]

    def reply(n: int, commands: list, done: bool = False, **more) -> dict:
        text = json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": done} | more)
        return {"step_id": n, "source": "agent", "message": text, "observation": {"results": [{"content": f"screen {n}"}]}}

    no_plan = reply(6, [{"keystrokes": "rm -rf /\n"}])
    no_plan["message"] = json.dumps({"commands": [{"keystrokes": "rm -rf /\n"}]})
    no_plan["observation"]["results"][0]["content"] = "Previous response had parsing errors:\nERROR: Missing required fields"
    steps = [
        {"step_id": 1, "source": "user", "message": "List /app"},
        {"step_id": 2, "source": "agent", "message": "", "tool_calls": calls, "observation": {"results": [{"content": "a.txt"}]}},
        reply(3, [{"keystrokes": "cat a.txt\n", "duration": 0.1}, {"keystrokes": "C-c", "duration": 0.1}]),
        reply(4, []),
        no_plan,
        reply(5, [], done=True),
    ]
    doc = {"schema_version": "ATIF-v1.5", "session_id": "t", "agent": {"name": "terminus-2", "version": "2"}, "steps": steps}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    import_files("atif", [tmp_path / "t.json"], tmp_path / "st", source="probe")
    got = rows(tmp_path / "st")
    assert [json.loads(r["action"]) for r in got] == [
        {"kind": "send_keys", "keys": "cd /app\nls", "enter": True, "special": False},
        {"kind": "send_keys", "keys": "cat a.txt\nC-c", "enter": False, "special": False},
        {"kind": "wait"},
        {"kind": "message", "text": no_plan["message"]},
        {"kind": "finish", "answer": ""},
    ]
    assert [r["obs"] for r in got][:2] == ["a.txt", "screen 3"] and got[0]["domain"] == "terminal"
    unseen = {"step_id": 7, "source": "agent", "message": "", "tool_calls": calls}  # typed, no screen after: no transition
    doc["steps"] = [*steps[:2], unseen]
    (tmp_path / "u.json").write_text(json.dumps(doc | {"session_id": "u"}))
    assert import_files("atif", [tmp_path / "u.json"], tmp_path / "st2", source="probe").transitions == 1
