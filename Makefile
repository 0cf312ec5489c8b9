# Meteor: a control plane for fleets of edge devices.
# `make help` lists the targets.

GO        ?= go
BIN       := bin/meteor
AGENT_BIN := bin/meteor-agent
PKGS      := ./...
# make test must stay well under 15 minutes with -race on 2 cores.
TEST_TIMEOUT ?= 14m
# Test binaries run TEST_P at a time: most tests wait on timers and
# networks rather than use a CPU (with 2 at a time a run on 2 cores used a
# third of them: 8 min 43 s; with 4, 7 min 31 s), and every test holds on
# a loaded host.
TEST_P ?= 4
# The cluster package's tests take 7.5 minutes one after another with
# -race, waiting on timers and networks for three quarters of it (117 s
# of CPU in 450 s). It runs as TEST_SHARDS test processes at once, beside
# the other packages, each given every TEST_SHARDS-th of its tests by name.
# Four shards took 40 s off a run on a quiet machine, but with two busy
# loops beside them the cluster tests lost leaders they keep with two;
# three took 33 s off such a loaded run (9:38 against 10:11) and starved
# chaos/scenario's 200-device fleet, which converged 46 of 200 in its 3
# minutes (63 s on its own beside the same loops).
TEST_SHARDS ?= 2
SHARDED_PKG := ./cluster
FUZZTIME  ?= 10s
# A short minimisation keeps a short run fuzzing: with go's default (60s)
# one new input can take a whole FUZZTIME to minimise (FuzzParse).
FUZZMINIMIZETIME ?= 1s
CHAOS_SEEDS    ?= 5
CHAOS_DURATION ?= 20s
# Extra flags for meteor dev in make demo (see bin/meteor dev --help).
DEMO_FLAGS ?=
# Extra flags for bench/footprint in make bench-footprint.
FOOTPRINT_FLAGS ?=
# The container image make image builds (deploy/build-image.sh).
IMAGE ?= meteor:dev

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-15s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/meteor
	$(GO) build -o $(BIN) ./cmd/meteor

.PHONY: build-agent
build-agent: ## Build bin/meteor-agent, the agent alone for devices: static (CGO_ENABLED=0), stripped; GOOS/GOARCH cross-compile (GOARCH=arm64)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "-s -w" -o $(AGENT_BIN) ./cmd/meteor-agent
	@if command -v file >/dev/null; then \
	  file $(AGENT_BIN) | grep -q 'statically linked' || { file $(AGENT_BIN); echo "$(AGENT_BIN) is not statically linked"; exit 1; }; \
	fi
	@ls -l $(AGENT_BIN) | awk '{printf "%s: %.1f MB, statically linked\n", $$NF, $$5/1e6}'

.PHONY: image
image: ## Build the static bin/image/meteor with the local Go toolchain (CGO_ENABLED=0) and the image IMAGE (meteor:dev) FROM scratch around it (Dockerfile)
	GO=$(GO) deploy/build-image.sh $(IMAGE) bin/image

.PHONY: cluster-up
cluster-up: ## A secure three-region cluster on Docker (deploy/compose.yaml): image, PKI in deploy/state if missing, a server and a 30-device simulated fleet per region; prints the export line and the console's address
	GO=$(GO) deploy/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Remove the cluster-up containers and networks, keeping deploy/state (PKI, data) for the next cluster-up; PURGE=1 removes it too
	deploy/cluster.sh $(if $(filter 1,$(PURGE)),purge,down)

.PHONY: demo
demo: build ## A local 3-server cluster and a simulated 1,200-device retail fleet taking three changes in waves, status and waves redrawn live, the web console's address printed; more flags: DEMO_FLAGS="--base-port 9470 --keep-running"
	./$(BIN) dev --servers 3 --fleet retail --changes docs/examples/retail $(DEMO_FLAGS)

.PHONY: test
test: ## Run all tests with the race detector (and the agent's and wire's again without it)
	@# First every package and test is compiled, by one go command for
	@# the race builds and one for the meteor binary the benchmarks'
	@# tests run (METEOR_BIN), so that no two go commands compile the same
	@# packages at once: on a clean machine that took more CPU than the
	@# tests themselves. Race builds of the agent send no 0-RTT data, and
	@# the wire 0-RTT test skips under -race (quic-go#4303, see
	@# agent/race.go); their tests run again without -race so the 0-RTT
	@# paths are tested too, beside the race run, and print when it ends.
	@# The cluster package runs as TEST_SHARDS processes beside the other
	@# packages (above).
	@dir=$$(mktemp -d); trap 'rm -rf "$$dir"' EXIT; \
	$(GO) build -o "$$dir/meteor" ./cmd/meteor & build=$$!; \
	$(GO) test -race -exec /bin/true $(PKGS) >"$$dir/compile" 2>&1 || { cat "$$dir/compile"; exit 1; }; \
	wait $$build || exit 1; export METEOR_BIN="$$dir/meteor"; \
	$(GO) test -count=1 ./agent ./wire >"$$dir/norace" 2>&1 & norace=$$!; \
	( $(GO) test -race -list . $(SHARDED_PKG) >"$$dir/list" 2>&1 || { cat "$$dir/list"; exit 1; }; \
	  grep -E '^(Test|Fuzz|Example)' "$$dir/list" >"$$dir/names" || { echo "no tests listed in $(SHARDED_PKG)"; exit 1; }; \
	  pids=; for i in $$(seq 1 $(TEST_SHARDS)); do \
	    re=$$(awk -v n=$(TEST_SHARDS) -v i=$$i 'NR % n == i % n' "$$dir/names" | paste -sd'|'); \
	    $(GO) test -race -shuffle=on -timeout $(TEST_TIMEOUT) -run "^($$re)\$$" $(SHARDED_PKG) >"$$dir/shard$$i" 2>&1 & pids="$$pids $$!"; \
	  done; \
	  rc=0; for p in $$pids; do wait $$p || rc=1; done; \
	  for i in $$(seq 1 $(TEST_SHARDS)); do echo "$(SHARDED_PKG), shard $$i of $(TEST_SHARDS):"; cat "$$dir/shard$$i"; done; \
	  exit $$rc ) & sharded=$$!; \
	$(GO) test -race -shuffle=on -p $(TEST_P) -timeout $(TEST_TIMEOUT) $$($(GO) list $(PKGS) | grep -vx "$$($(GO) list $(SHARDED_PKG))"); race=$$?; \
	wait $$sharded; shards=$$?; \
	wait $$norace; rc=$$?; \
	echo "go test -count=1 ./agent ./wire (without -race):"; cat "$$dir/norace"; \
	[ $$race -eq 0 ] && [ $$shards -eq 0 ] && [ $$rc -eq 0 ]

.PHONY: test-docker
test-docker: ## The three-region Docker cluster of make cluster-up taken through a region's loss and a rolling restart under writes (deploy/compose_test.go; skips without Docker)
	$(GO) test -count=1 -v -run TestThreeRegions -timeout 20m ./deploy -deploy.docker

.PHONY: test-short
test-short: ## Run all tests without the race detector (quicker while editing)
	$(GO) test -timeout $(TEST_TIMEOUT) $(PKGS)

.PHONY: bench
bench: bench-intents bench-fanout bench-sessions bench-status bench-queries bench-fleet bench-footprint bench-report ## Run every benchmark, write bench/results/ and the table of all of them with every goal row (bench/results/README.md; docs/performance.md says what each row measures)

.PHONY: bench-report
bench-report: ## Gather the summary rows of bench/results/*.json into bench/results/README.md, with the row of leader elections during any benchmark
	$(GO) run ./bench/report

.PHONY: bench-fanout
bench-fanout: build ## 10,000 devices, three changes (the median is the row): 99 % applied and 99 % reported and durable, Meteor vs Mosquitto with TLS and persistence (and plaintext), clean and 5% loss (installs mosquitto if missing; loss rows and UDP buffer sizing need root)
	$(GO) run ./bench/fanout -meteor-bin $(BIN)

.PHONY: bench-fleet
bench-fleet: build ## Connect 100,000 devices and the largest fleet converging on one change (3 servers + 10k..100k light devices on this host), and the 1,200-device retail fleet of full agents
	$(GO) run ./bench/fleet -sizes 10000,25000,50000,100000 -meteor-bin $(BIN)

.PHONY: bench-retail
bench-retail: build ## Row 5 only: the retail fleet, time to 50/90/99/100 % per change and link profile
	$(GO) run ./bench/fleet -parts retail -name retail -meteor-bin $(BIN)

.PHONY: bench-footprint
bench-footprint: build build-agent ## Row 6: one idle bin/meteor-agent behind a NAT, 10 min each on fiber and cellular once it learned the binding (5-15 min): bytes a day, push latency, RSS, CPU, binary size (FOOTPRINT_FLAGS="-duration 2m")
	$(GO) run ./bench/footprint -meteor-bin $(BIN) -agent-bin bin/meteor-agent $(FOOTPRINT_FLAGS)

.PHONY: bench-intents
bench-intents: build ## Intent writes/s, p99 and server CPU per write: Meteor vs a 3-member etcd (installs etcd-server if missing)
	$(GO) run ./bench/intents -meteor-bin $(BIN)

.PHONY: bench-sessions
bench-sessions: build ## Server memory per idle session, reconnect storm of 10,000 devices (0-RTT vs full handshakes), resync bytes, reconnect time, graceful shutdown of a server with 1,000 sessions
	$(GO) run ./bench/sessions -meteor-bin $(BIN)

.PHONY: bench-status
bench-status: ## Status transitions/s, Raft entries per 1,000 transitions, visibility delay (10,000 devices x 5, 3 servers); an owner's evaluation of 10,000 settled devices (by due time, reading every record, judging them all)
	$(GO) test -run '^$$' -bench BenchmarkStatusTransitions -benchtime 1x -timeout 10m ./cluster
	$(GO) test -run '^$$' -bench BenchmarkStatusEvaluate -benchtime 120x -timeout 10m ./cluster

.PHONY: bench-queries
bench-queries: ## Fleet queries (GET /v1/devices) on a 100,000-device replica, each against the sweep of GET /v1/devices/{id} it replaces (METEOR_BENCH_DEVICES=N to resize)
	$(GO) test -run '^$$' -bench BenchmarkDeviceQueries -benchtime 1x -timeout 20m ./cluster

.PHONY: chaos
chaos: build ## Every chaos scenario with several seeds (table of faults, ops checked, violations, reconvergence), then the Docker multi-host suite
	./$(BIN) chaos matrix --seeds $(CHAOS_SEEDS) --duration $(CHAOS_DURATION)
	$(GO) test -count=1 -v -run TestMultiHost -timeout 10m ./chaos/docker -chaos.docker

.PHONY: fuzz
fuzz: ## Run every fuzz target (found by go test -list) for FUZZTIME each (default 10s; FUZZMINIMIZETIME 1s)
	@failed=""; n=0; \
	for pd in $$($(GO) list -f '{{.ImportPath}}={{.Dir}}' $(PKGS)); do \
	  pkg=$${pd%%=*}; dir=$${pd#*=}; \
	  grep -qs '^func Fuzz' $$dir/*_test.go || continue; \
	  list=$$($(GO) test -list '^Fuzz' $$pkg) || { failed="$$failed $$pkg(build)"; continue; }; \
	  for f in $$(echo "$$list" | grep '^Fuzz'); do \
	    n=$$((n+1)); echo "== $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZETIME) $$pkg || failed="$$failed $$pkg.$$f"; \
	  done; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed (a crasher is under the package's testdata/fuzz/)"; exit 1; fi; \
	if [ $$n -eq 0 ]; then echo "fuzz: no fuzz target found"; exit 1; fi; \
	echo "fuzz: $$n targets ran for $(FUZZTIME) each, none failed"

.PHONY: lint
lint: ## gofmt, go vet, and staticcheck if installed
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@if command -v staticcheck >/dev/null; then staticcheck $(PKGS); else echo "staticcheck not installed; skipped"; fi

.PHONY: verify
verify: ## Check that go.mod is tidy
	$(GO) mod tidy -diff

.PHONY: clean
clean: ## Remove build output
	rm -rf bin
