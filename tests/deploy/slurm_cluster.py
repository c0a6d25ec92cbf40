"""A one-node Slurm cluster on this host for tests and benchmarks: munged, slurmctld and
slurmd from Debian's `slurm-wlm` and `munge` (scripts/install-system-deps.sh), each run in
the foreground from a folder of its own, with a generated ``slurm.conf``.

Nothing of the host's is used or touched: munged gets a fresh key in the folder and a
socket in a fresh folder of /tmp (``AuthInfo=socket=...``, so no system munged, key or
``/run/munge`` is needed); state, spool and logs live in the folder, and two free ports
keep it apart from any other cluster. No cgroups (``proctrack/linuxproc``, ``task/none``):
it runs in a container as on a host.
The daemons run as root, as Slurm's always do::

    with slurm_cluster(tmp) as cluster:
        job = cluster.sbatch("--array=0-1", "deploy/slurm/collect-array.sh", env={"JOB": ...})
        cluster.wait(job)
        cluster.states(job)    # {"12_0": "COMPLETED", "12_1": "COMPLETED"}
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.s3server import stop_process

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo")
CPUS = 2
KILL_WAIT_S = 2  # SIGTERM to SIGKILL on scancel (Slurm's default is 30 s)


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _memory_mb() -> int:
    kib = int(Path("/proc/meminfo").read_text().split("MemTotal:")[1].split()[0])
    return kib // 1024 - 512  # below what slurmd finds, or it drains the node


class SlurmCluster:
    """The running cluster: its folder, ``slurm.conf``, and the client commands."""

    def __init__(self, folder: Path) -> None:
        self.dir = folder
        self.conf = folder / "slurm.conf"
        self.node = socket.gethostname().split(".")[0]
        # the clients read the generated conf; a caller inside a Slurm job must not pass its own job on
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")} | {"SLURM_CONF": str(self.conf)}
        self._procs: dict[str, subprocess.Popen] = {}
        self._socket_dir: Path | None = None

    # -- clients ---------------------------------------------------------------------------------
    def run(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, check: bool = True):
        proc = subprocess.run(args, capture_output=True, text=True, env={**self.env, **(env or {})}, cwd=cwd, timeout=60)
        if check and proc.returncode:
            raise RuntimeError(f"{' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}\n{self.logs()}")
        return proc

    def sbatch(self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
        """Submit; returns the job id (of the whole array)."""
        return self.run("sbatch", "--parsable", *args, env=env, cwd=cwd).stdout.strip().split(";")[0]

    def queued(self, job: str) -> dict[str, str]:
        """``{"<job>_<task>": state}`` of the job's tasks still pending or running."""
        out = self.run("squeue", "-h", "-r", "-j", job, "-o", "%i %T", check=False).stdout
        return dict(line.split() for line in out.splitlines() if line.strip())

    def states(self, job: str) -> dict[str, str]:
        """``{"<job>_<task>": state}`` of every task of the job, finished ones too (kept for MinJobAge)."""
        out = self.run("scontrol", "-o", "show", "job", job).stdout
        fields = [dict(kv.split("=", 1) for kv in line.split() if "=" in kv) for line in out.splitlines() if line.strip()]
        return {f"{f['ArrayJobId']}_{f['ArrayTaskId']}" if "ArrayTaskId" in f else f["JobId"]: f["JobState"] for f in fields}

    def wait(self, job: str, timeout: float = 300.0, poll: float = 0.1) -> dict[str, str]:
        """Wait until no task of the job is pending or running; returns their final states."""
        deadline = time.monotonic() + timeout
        while self.queued(job):
            if time.monotonic() > deadline:
                raise TimeoutError(f"slurm job {job} still queued after {timeout:.0f} s: {self.queued(job)}\n{self.logs()}")
            time.sleep(poll)
        return self.states(job)

    def scancel(self, job: str) -> None:
        self.run("scancel", job)

    def logs(self, lines: int = 15) -> str:
        tails = []
        for name in ("munged.log", "slurmctld.log", "slurmd.log"):
            path = self.dir / "log" / name
            if path.exists():
                tails.append(f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(tails)

    # -- life cycle ------------------------------------------------------------------------------
    def start(self, start_timeout_s: float = 60.0) -> SlurmCluster:
        missing = [c for c in DAEMONS if shutil.which(c) is None]
        if missing:
            raise RuntimeError(f"{', '.join(missing)} not found: apt-get install slurm-wlm munge (make system-deps)")
        if os.geteuid() != 0:
            raise RuntimeError("slurmd runs jobs as their users: it needs root")
        d = self.dir
        for sub in ("munge", "state", "spool", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        # munged refuses a key others can read, and a socket in a folder that not everyone can
        # enter, up to the root (pytest's and mkdtemp's folders are 0700): the socket goes in /tmp
        key = d / "munge" / "munge.key"
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
        self._socket_dir = Path(tempfile.mkdtemp(prefix="trajforge-munge-", dir="/tmp"))
        self._socket_dir.chmod(0o711)
        sock = self._socket_dir / "munge.socket"
        ctld_port, slurmd_port = _free_ports(2)
        self.conf.write_text(
            "\n".join(
                [
                    f"ClusterName=tf{ctld_port}",
                    f"SlurmctldHost={self.node}(127.0.0.1)",
                    f"SlurmctldPort={ctld_port}",
                    f"SlurmdPort={slurmd_port}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    f"AuthInfo=socket={sock}",
                    f"StateSaveLocation={d / 'state'}",
                    f"SlurmdSpoolDir={d / 'spool'}",
                    f"SlurmctldPidFile={d / 'slurmctld.pid'}",
                    f"SlurmdPidFile={d / 'slurmd.pid'}",
                    f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
                    f"SlurmdLogFile={d / 'log' / 'slurmd.log'}",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "AccountingStorageType=accounting_storage/none",
                    "JobCompType=jobcomp/none",
                    "MpiDefault=none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_CPU",
                    "ReturnToService=2",
                    f"KillWait={KILL_WAIT_S}",
                    "MinJobAge=600",
                    f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={CPUS} RealMemory={_memory_mb()} State=UNKNOWN",
                    f"PartitionName=main Nodes={self.node} Default=YES MaxTime=INFINITE State=UP",
                    "",
                ]
            )
        )
        munged = ["munged", "-F", f"--socket={sock}", f"--key-file={key}", f"--log-file={d / 'log' / 'munged.log'}"]
        self._spawn("munged", [*munged, f"--pid-file={d / 'munge' / 'munged.pid'}", f"--seed-file={d / 'munge' / 'munged.seed'}"])
        self._until(sock.exists, "munged made no socket", start_timeout_s)
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf)])
        self._spawn("slurmd", ["slurmd", "-D", "-f", str(self.conf)])

        def node_idle() -> bool:
            return self.run("sinfo", "-h", "-n", self.node, "-o", "%T", check=False).stdout.strip() == "idle"

        self._until(node_idle, "the node did not come up idle", start_timeout_s)
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.dir / "log" / f"{name}.out", "wb") as out:
            self._procs[name] = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=self.env, start_new_session=True, cwd=self.dir
            )

    def _until(self, ready, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            dead = [n for n, p in self._procs.items() if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                outs = "\n".join((self.dir / "log" / f"{n}.out").read_text(errors="replace")[-1500:] for n in self._procs)
                raise RuntimeError(f"slurm cluster: {what}{f' ({dead} exited)' if dead else ''}\n{outs}\n{self.logs()}")
            time.sleep(0.2)

    def stop(self) -> None:
        """Cancel what still runs (slurmstepd outlives slurmd), then stop the daemons."""
        if "slurmd" in self._procs and self._procs["slurmd"].poll() is None:
            self.run("scancel", "--user", "root", check=False)  # every job here is this cluster's
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.run("squeue", "-h", check=False).stdout.strip():
                time.sleep(0.2)
        for name in ("slurmd", "slurmctld", "munged"):
            proc = self._procs.pop(name, None)
            if proc is None or proc.poll() is not None:
                continue
            stop_process(proc)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)


@contextlib.contextmanager
def slurm_cluster(folder: Path) -> Iterator[SlurmCluster]:
    """A started cluster in ``folder`` (made if missing) while the context is open."""
    cluster = SlurmCluster(Path(folder))
    try:
        yield cluster.start()
    finally:
        cluster.stop()
