# The two entry points of the README. Both work on a fresh Debian machine (as root).
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
HOSTS ?= 4
# The demo's change: other EAGLE-3 numbers, a new release on every host, rolled out in batches.
CHANGE := --data speculative_num_steps=4 --data speculative_eagle_topk=1 --data speculative_num_draft_tokens=5 \
	--data 'rollout_serial=[1, "50%"]'

.PHONY: demo demo-rollout test deps down

## Boot the local fleet, converge it, then roll a changed launch configuration out wave by wave.
## node1-3 serve behind the fleet's own gateway on node4 (smg), through which clients go:
## the rollout runs under their traffic (the openai SDK's streamed chat completions and completions,
## native /generate), and the last lines count their requests by kind.
## A tiny model and its EAGLE-3 draft, pinned, staged on every host from a local HF mirror, served offline.
demo: export SGLFLEET_MODELS = $(CURDIR)/.fleet/mirror/manifests
demo: export SGLFLEET_DEV_GATEWAYS = 1
demo: deps
	$(BIN)/sglfleet devfleet up --hosts $(HOSTS)
	$(BIN)/sglfleet devfleet mirror up
	@# The clients' key, issued as an operator would (the fleet's other keys are made by its first converge).
	@$(BIN)/sglfleet keys show inventory/dev.py demo >/dev/null 2>&1 || \
		$(BIN)/sglfleet keys issue inventory/dev.py demo >/dev/null
	@echo "The clients' key 'demo' is kept in $$($(BIN)/python -c 'from sglfleet.devfleet import Fleet; print(Fleet().secrets_file)'); sglfleet keys list inventory/dev.py lists the fleet's keys."
	$(BIN)/pyinfra inventory/dev.py deploy.py -y
	$(BIN)/sglfleet status inventory/dev.py
	$(BIN)/pyinfra inventory/dev.py deploy.py --dry --diff $(CHANGE)
	$(BIN)/sglfleet devfleet traffic -- $(MAKE) --no-print-directory demo-rollout

# The demo's rollout and the status after it, under the clients' traffic: their count comes last.
demo-rollout:
	$(BIN)/pyinfra inventory/dev.py deploy.py -y $(CHANGE)
	$(BIN)/sglfleet status inventory/dev.py $(CHANGE)

## Run the whole test suite: four workers, each with a local fleet of its own (with bytecode
## compiled, two workers kept the 2 cores about 43 % busy, four about 84 %: the suite waits on hosts).
test: deps
	$(BIN)/pytest -ra -n 4 --dist loadfile

## Stop and remove the local fleet.
down: deps
	$(BIN)/sglfleet devfleet down

# The project's own bytecode, as the venv's (scripts/install-deps): pyinfra never writes it.
deps: $(VENV)/.installed
	@$(BIN)/python -m compileall -q sglfleet tasks files/shipped >/dev/null

$(VENV)/.installed: pyproject.toml uv.lock scripts/install-deps scripts/uv-requirements.txt
	scripts/install-deps
