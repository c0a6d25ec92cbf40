"""A quiet CLI: Beam's and other libraries' logs hidden unless --verbose (the worker
processes' output included), our own warnings shown, a summary line per pass."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from collectors.synth import Synthesizer
from pipelines import progress
from pipelines.release.tokens import train_tokenizer
from pipelines.store import StoreWriter
from tests.conftest import SMALL, cli

TICK = re.compile(r"^[\w ./-]+: [\d,]+/[\d,]+ \w+ \([\d.,]+ \w+/s\)")  # a plain progress line, every 5 s while work runs
LIBRARY_LOG = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL):|apache_beam|semi_persistent|Worker: severity", re.M)


def _raw_store(path, n: int = 120) -> str:
    gen = Synthesizer(4, duplicates=0.3, **SMALL)
    with StoreWriter(str(path), gen.run_id) as w:
        w.write_many(gen.transitions(n))
    return str(path)


def test_curate_and_release_are_quiet_and_verbose_shows_beam(tmp_path):
    store = _raw_store(tmp_path / "s")
    shutil.copytree(store, tmp_path / "v")
    curate = cli("curate", "examples/curation/default.yaml", "--store", store)
    assert not LIBRARY_LOG.search(curate.stderr), curate.stderr
    err = _steady(curate.stderr)
    assert len(err) <= 4 and len(curate.stdout.splitlines()) <= 12, curate.stderr + curate.stdout
    assert any(
        re.match(r"curate pass 1/1: 120/120 transitions in [\d.]+ s \([\d.,]+ transitions/s, \d+/\d+ pieces written\)$", line)
        for line in err
    ), err

    texts = [t.next_state.text for t in Synthesizer(0, **SMALL).transitions(200)]
    train_tokenizer(texts, str(tmp_path / "s" / "tokenizer.json"), vocab_size=300)
    release = cli("release", "create", "examples/mixtures/default.yaml", "--store", store, "--name", "q", "--version", "1")
    assert not LIBRARY_LOG.search(release.stderr), release.stderr
    err = _steady(release.stderr)
    assert len(err) <= 4 and len(release.stdout.splitlines()) <= 6, release.stderr + release.stdout
    assert any(re.match(r"release samples: (\d+)/\1 shards in [\d.]+ s", line) for line in err), err
    assert any(re.match(r"release files: (\d+)/\1 files in [\d.]+ s", line) for line in err), err

    loud = cli("--verbose", "curate", "examples/curation/default.yaml", "--store", str(tmp_path / "v"), "--direct_num_workers=1")
    assert len(LIBRARY_LOG.findall(loud.stderr)) >= 5 and "sdk_worker" in loud.stderr  # the worker process's own lines
    assert loud.stdout == curate.stdout.replace(_seconds(curate.stdout), _seconds(loud.stdout))


def _steady(stderr: str) -> list[str]:
    """The lines of stderr but the periodic progress lines (how many depends on the time taken)."""
    return [line for line in stderr.splitlines() if not TICK.match(line)]


def _seconds(report: str) -> str:
    return next(line for line in report.splitlines() if line.strip().startswith("seconds:"))


CHILD = "import sys; print('INFO:apache_beam.worker:noise', file=sys.stderr); print('warning: skipped x.arrow', file=sys.stderr)"


def test_quiet_hides_child_processes_output_but_passes_our_warnings(capfd):
    with progress.quiet():
        subprocess.run([sys.executable, "-c", CHILD], check=True)
        print("WARNING:root:driver noise", file=sys.stderr, flush=True)
        progress.say("curate pass 1/1: done")
    err = capfd.readouterr().err
    assert "noise" not in err and sorted(err.splitlines()) == ["curate pass 1/1: done", "warning: skipped x.arrow"]
    progress.set_verbose(True)
    try:
        with progress.quiet():
            subprocess.run([sys.executable, "-c", CHILD], check=True)
    finally:
        progress.set_verbose(False)
    assert "INFO:apache_beam.worker:noise" in capfd.readouterr().err


def test_a_crash_keeps_the_log_and_names_it(capfd):
    try:
        with progress.quiet():
            subprocess.run([sys.executable, "-c", CHILD], check=True)
            raise RuntimeError("worker died")
    except RuntimeError:
        pass
    err = capfd.readouterr().err
    log = Path(re.search(r"note: the libraries' log of this run is in (\S+)", err).group(1))
    assert "INFO:apache_beam.worker:noise" in log.read_text()
    log.unlink()
