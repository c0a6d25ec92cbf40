"""deploy/kubernetes/ without a cluster: every manifest validates strictly (unknown fields
refused) against the Kubernetes API's own schemas, which kubernetes-validate bundles per
release, and each pod runs what the same task of deploy/slurm/collect-array.sh runs: pod I
of the Indexed Job collects shard I of N, I its completion index and N its completions.

Both commands are run by their real shells with a stand-in `trajforge` that prints its
arguments, and the arguments are parsed by the real CLI. What only a cluster shows is not
checked here: the image pulled, the shared volume mounted, the sandboxes working in a pod."""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import typer
import yaml

from collectors.cli import app as collectors_app

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
SLURM_SCRIPT = ROOT / "deploy" / "slurm" / "collect-array.sh"
#: the oldest release the manifests run on (backoffLimitPerIndex is on by default from 1.29,
#: and 1.27's schema refuses it), and the newest that kubernetes-validate bundles
K8S_VERSIONS = ["1.29", "1.37"]


def resources(path: Path) -> list[dict]:
    return [r for r in yaml.safe_load_all(path.read_text()) if r]


def job_spec(resource: dict) -> dict:
    """The Job spec of a Job, or of the Jobs a CronJob starts."""
    assert resource["apiVersion"] == "batch/v1", resource["apiVersion"]
    assert resource["kind"] in ("Job", "CronJob"), resource["kind"]
    return resource["spec"]["jobTemplate"]["spec"] if resource["kind"] == "CronJob" else resource["spec"]


def container(resource: dict) -> dict:
    (only,) = job_spec(resource)["template"]["spec"]["containers"]
    return only


def sbatch_option(name: str) -> str:
    (value,) = re.findall(rf"^#SBATCH --{name}=(\S+)$", SLURM_SCRIPT.read_text(), flags=re.M)
    return value


def test_the_manifests_are_found():
    assert [p.name for p in MANIFESTS] == ["collect-cronjob.yaml", "collect-indexed-job.yaml"]
    assert all(len(resources(p)) == 1 for p in MANIFESTS)


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_validates_strictly(path: Path, version: str):
    for resource in resources(path):
        try:
            assert kubernetes_validate.validate(resource, version, strict=True) == version
        except kubernetes_validate.ValidationError as e:  # one line, not the schema's pages
            pytest.fail(f"{path.name} against {version}: {'.'.join(map(str, e.path))}: {e.message}", pytrace=False)


MUTATIONS = {
    "a misspelt job field": (lambda spec: spec.update(backoffLimitPerindex=2), "'backoffLimitPerindex' was unexpected"),
    "an unknown container field": (lambda spec: spec["template"]["spec"]["containers"][0].update(comand=["sh"]), "'comand'"),
    "a count as a string": (lambda spec: spec.update(completions="8"), "'8' is not of type 'integer'"),
    "args as one string": (
        lambda spec: spec["template"]["spec"]["containers"][0].update(args="trajforge collect"),
        "is not of type 'array'",
    ),
}


@pytest.mark.parametrize("mutation", MUTATIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_an_unknown_field_or_a_wrong_type_is_refused(path: Path, mutation: str):
    mutate, message = MUTATIONS[mutation]
    for resource in resources(path):
        bad = copy.deepcopy(resource)
        mutate(job_spec(bad))
        with pytest.raises(kubernetes_validate.ValidationError) as refused:
            kubernetes_validate.validate(bad, K8S_VERSIONS[-1], strict=True)
        assert message in refused.value.message


def test_names_fit_what_the_api_server_allows():
    """Beyond the schema: names are DNS labels, a Job's name goes into a label (63
    characters), and a CronJob's Jobs add 11 characters to its own."""
    for path in MANIFESTS:
        for resource in resources(path):
            name = resource["metadata"]["name"]
            assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
            assert len(name) <= {"Job": 63, "CronJob": 52}[resource["kind"]], name


def test_the_cronjob_starts_the_indexed_job_and_never_two_at_once():
    by_kind = {r["kind"]: r for p in MANIFESTS for r in resources(p)}
    assert job_spec(by_kind["CronJob"]) == job_spec(by_kind["Job"])
    assert by_kind["CronJob"]["spec"]["concurrencyPolicy"] == "Forbid"


def slurm_argv(index: int, count: int, store: str, fake: Path) -> list[str]:
    """What array task ``index`` of a whole array 0..count-1 runs, the store set as in the pod."""
    env = {
        "PATH": os.environ["PATH"],
        "SLURM_ARRAY_TASK_ID": str(index),
        "SLURM_ARRAY_TASK_MIN": "0",
        "SLURM_ARRAY_TASK_MAX": str(count - 1),
        "SLURM_ARRAY_TASK_COUNT": str(count),
        "TRAJFORGE": str(fake),
        "STORE": store,
    }
    proc = subprocess.run(["bash", str(SLURM_SCRIPT)], env=env, cwd=fake.parent, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def pod_argv(resource: dict, index: int, fake: Path) -> list[str]:
    """What the pod of completion index ``index`` runs: the container's command and args."""
    spec = container(resource)
    env = {"PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}", "JOB_COMPLETION_INDEX": str(index)}
    proc = subprocess.run([*spec["command"], *spec["args"]], env=env, cwd=fake.parent, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.fixture
def fake_trajforge(tmp_path: Path) -> Path:
    """A `trajforge` that prints its arguments, one a line."""
    fake = tmp_path / "trajforge"
    fake.write_text("#!/bin/sh\nprintf '%s\\n' \"$@\"\n")
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_pod_i_of_n_runs_what_slurm_array_task_i_of_n_runs(path: Path, fake_trajforge: Path):
    collect = typer.main.get_command(collectors_app).commands["collect"]
    first, last = map(int, sbatch_option("array").split("-"))
    for resource in resources(path):
        spec, pod = job_spec(resource), container(resource)
        count = spec["completions"]
        assert spec["completionMode"] == "Indexed" and spec["template"]["spec"]["restartPolicy"] == "Never"
        assert count == spec["parallelism"] == last - first + 1 and first == 0  # as many pods as array tasks, all at once
        (store,) = [m["mountPath"] for m in pod["volumeMounts"] if m["name"] == "store"]
        workdir = re.findall(r"^WORKDIR (\S+)$", (ROOT / "Dockerfile").read_text(), flags=re.M)[-1]
        assert pod["workingDir"] == workdir  # where the image has examples/, as the job path expects

        for index in range(count):
            argv = pod_argv(resource, index, fake_trajforge)
            assert argv == slurm_argv(index, count, store, fake_trajforge)
            assert argv[0] == "collect"
            params = collect.make_context("collect", argv[1:]).params  # the real CLI parses them
            assert (params["shard"], params["num_shards"], params["store"]) == (index, count, store)
            assert (ROOT / params["job_file"]).is_file()


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_a_pod_asks_for_what_an_array_task_asks_for(path: Path):
    slurm_memory = sbatch_option("mem")  # Slurm's K, M, G are binary multiples
    for resource in resources(path):
        requests = container(resource)["resources"]["requests"]
        assert requests["cpu"] == sbatch_option("cpus-per-task")
        assert requests["memory"] == re.sub(r"([KMGT])$", r"\1i", slurm_memory)
