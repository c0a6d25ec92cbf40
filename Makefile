# Everything a fresh Debian 12 machine with Python 3.11 needs: `make demo`, `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
EXTRAS ?= dev
# The CPU build of torch, installed before the project so that its `torch>=2.4` does not pull a CUDA build.
TORCH ?= torch==2.13.0
STORE ?= demo-store

.PHONY: install system-deps mcp-servers verifiers-env sandboxes demo test test-unit lint bench-store bench-import bench-sandboxes bench-collect bench-curate bench-curate-small bench-neardup bench-release bench-train bench-web bench-mcp bench-search bench-os bench-android image bench-collect-scale bench-sim bench-s3 bench-scrub bench-security clean

$(VENV)/.installed-$(EXTRAS): pyproject.toml
	@$(PYTHON) -m venv $(VENV) || { echo "python3 -m venv failed: apt-get install -y python3-venv"; exit 1; }
	$(PY) -m pip install -q --upgrade pip
	@if echo "$(EXTRAS)" | grep -qE 'dev|train'; then $(PY) -m pip install -q "$(TORCH)"; fi
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	@touch $@

# The project's modules compiled here, every time (0.2 s; only what changed): where
# PYTHONDONTWRITEBYTECODE is set, as on CI machines and in containers, Python writes no
# bytecode and compiles every module it imports at each start of a command (0.07 s of CPU
# of the 0.8 s an empty `trajforge import` takes; benchmarks/import.py --startup).
PACKAGES := trajforge.py schemas llm sandboxes collectors formats pipelines training simulate serve
install: $(VENV)/.installed-$(EXTRAS)
	@$(PY) -m compileall -q -j0 $(PACKAGES) >/dev/null

# Debian packages (podman, runc, debootstrap, bubblewrap, tmux): needs root or sudo.
system-deps:
	bash scripts/install-system-deps.sh

# The published MCP servers, each in its own virtual environment under .venv-mcp/.
mcp-servers:
	PYTHON=$(PYTHON) bash scripts/install-mcp-servers.sh

# The Podman service (Docker API) and the sandbox root and images, cached between runs.
sandboxes: install system-deps
	$(VENV)/bin/trajforge sandboxes engine start
	$(VENV)/bin/trajforge sandboxes build
	$(VENV)/bin/trajforge sandboxes gc

demo: install system-deps mcp-servers
	rm -rf $(STORE)
	$(VENV)/bin/trajforge sandboxes build --local-only
	$(VENV)/bin/trajforge synth $(STORE) --transitions 2000 --seed 1 --duplicates 0.1
	$(VENV)/bin/trajforge collect examples/jobs/terminal-swe.yaml --store $(STORE)
	$(VENV)/bin/trajforge collect examples/jobs/web.yaml --store $(STORE)
	$(VENV)/bin/trajforge collect examples/jobs/web-explore.yaml --store $(STORE)
	$(VENV)/bin/trajforge collect examples/jobs/mcp.yaml --store $(STORE)
	$(VENV)/bin/trajforge collect examples/jobs/search.yaml --store $(STORE)
	$(VENV)/bin/trajforge collect examples/jobs/os.yaml --store $(STORE)
	$(VENV)/bin/trajforge collect examples/jobs/android-sim.yaml --store $(STORE)  # starts its own simulated phone
	$(VENV)/bin/trajforge shards validate $(STORE)
	$(VENV)/bin/trajforge query "SELECT task_id, count(*) AS steps, max(reward) AS reward, any_value(provenance.sandbox_backend) AS sandbox FROM transitions WHERE provenance.job_id = 'terminal-swe' GROUP BY 1 ORDER BY 1" --store $(STORE)
	$(VENV)/bin/trajforge query "SELECT domain, count(*) AS transitions, count(DISTINCT trajectory_id) AS trajectories, round(avg(length(next_state.text))) AS avg_next_state_chars, round(avg(CASE WHEN action_error IS NULL THEN 0 ELSE 1 END), 3) AS failed_ratio FROM transitions GROUP BY 1 ORDER BY 1" --store $(STORE)
	$(VENV)/bin/trajforge curate examples/curation/default.yaml --store $(STORE)
	$(VENV)/bin/trajforge tokenizer train --store $(STORE) --out $(STORE)/tokenizer.json --vocab-size 2048
	$(VENV)/bin/trajforge release create examples/mixtures/default.yaml --store $(STORE) --name demo --version 1
	$(VENV)/bin/trajforge release verify $(STORE)/releases/demo/1
	$(VENV)/bin/trajforge train cpt examples/training/tiny-cpt.yaml --store $(STORE) --output $(STORE)/runs/tiny-cpt
	$(VENV)/bin/trajforge train sft examples/training/tiny-sft.yaml --store $(STORE) --model $(STORE)/runs/tiny-cpt --output $(STORE)/runs/tiny-sft
	$(VENV)/bin/trajforge train eval --model $(STORE)/runs/tiny-sft --store $(STORE) --release demo/1 --max-samples 4 --max-new-tokens 32 --rollouts 2
	$(VENV)/bin/trajforge sim compare examples/jobs/terminal-swe.yaml --model $(STORE)/runs/tiny-sft --max-new-tokens 32  # the tiny world model beside the real environments

test: install sandboxes mcp-servers verifiers-env
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q tests

# The fast loop: tests that need only `make install` (no root, Podman, sandbox build, system
# packages or MCP servers; markers set in tests/conftest.py). `make test` runs everything.
UNIT_MARKERS ?= not sandbox and not system and not mcp_servers and not slow
test-unit: install
	$(PY) -m pytest -q -m "$(UNIT_MARKERS)" tests

lint: install
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

bench-store: install
	$(PY) benchmarks/store.py

# issue 25: import throughput (SWE-agent, OpenHands, ATIF) and export
bench-import: install
	$(PY) benchmarks/import.py

bench-sandboxes: sandboxes
	$(PY) benchmarks/sandboxes.py

bench-collect: sandboxes
	$(PY) benchmarks/collect.py

bench-curate: install
	$(PY) benchmarks/curate.py

bench-curate-small: install
	$(PY) benchmarks/curate_small.py

# verifiers pins its own mcp and openai (mcp==2.0.0, openai<3), which trajforge's stack cannot
# share: its adapter (serve/verifiers.py) runs in a virtual environment of its own, with
# openenv-core's client, this repository without its dependencies, and uv (verifiers runs its
# chat program with it).
.venv-verifiers/.installed: pyproject.toml
	$(PYTHON) -m venv .venv-verifiers
	.venv-verifiers/bin/pip install -q "verifiers==0.4.0" "openenv-core>=0.3,<0.4" "uv>=0.9,<1"
	.venv-verifiers/bin/pip install -q --no-deps -e .
	@touch $@

verifiers-env: .venv-verifiers/.installed

# datatrove goes into a virtual environment of its own: a benchmark's baseline, not a dependency.
# (xxhash < 4: datatrove 0.10.1 hashes str, which xxhash 4 refuses.)
.venv-datatrove/.installed:
	$(PYTHON) -m venv .venv-datatrove
	.venv-datatrove/bin/pip install -q "datatrove==0.10.1" "xxhash>=3,<4" "orjson>=3,<4" "regex" "tokenizers>=0.20,<1" "spacy>=3.7,<4"
	@touch $@

bench-neardup: install .venv-datatrove/.installed
	$(PY) benchmarks/neardup.py

bench-release: install
	$(PY) benchmarks/release.py

bench-train: install
	$(PY) benchmarks/train.py

bench-web: install system-deps
	$(PY) benchmarks/web.py

clean:
	rm -rf $(VENV) $(STORE) .pytest_cache

bench-mcp: install mcp-servers
	$(PY) benchmarks/mcp_tools.py

bench-search: install
	$(PY) benchmarks/search.py

bench-os: install system-deps
	$(PY) benchmarks/os_desktop.py

bench-android: install system-deps
	$(PY) benchmarks/android_sim.py

# Simulated (SimEnv, tiny model on the CPU) vs real steps/s for terminal and SWE; on a GPU: ARGS="--size 0.6b".
bench-sim: sandboxes
	$(PY) benchmarks/sim.py $(ARGS)

# The project image (top-level Dockerfile) with Podman or Docker: IMAGE, BASE_IMAGE, BEAM_BOOT_IMAGE, ENGINE, IMAGE_EXTRAS.
image:
	bash scripts/build-image.sh

bench-collect-scale: sandboxes
	$(PY) benchmarks/collect_scale.py

# Store writer upload throughput to a local S3 server (moto) vs local disk.
bench-s3: install
	$(PY) benchmarks/s3.py

# Secret scrubber: recall on planted secrets, lines changed on ordinary text, throughput vs the old one.
bench-scrub: install
	$(PY) benchmarks/scrub.py $(ARGS)

# The security suite's tally: attacks tried and contained per class (and per sandbox backend).
bench-security: sandboxes mcp-servers
	$(PY) benchmarks/security.py
