# Plumeria. `make test` is what CI runs (see .ci/run and README.md).
GO ?= go
BIN := bin/plumeria
TEST_TIMEOUT ?= 60m

.PHONY: build test test-short vet deps proto fuzz bench-vdisk chaos chaos-short sim-soak clean image cluster-up cluster-down

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/plumeria

# deps installs what the tests need on a fresh Debian machine, if missing.
# NFS clients for the NFS gateway's tests (docs/testing.md, "NFS clients"):
# libnfs-utils (nfs-ls, nfs-cp, nfs-cat), and fuse-nfs built with its POSIX
# fixes into $(FUSE_NFS_PREFIX) from FUSE_NFS_SRC (GPL source kept outside
# this repository) by deploy/fuse-nfs-build.sh, which returns at once when built.
FUSE_NFS_SRC ?= $(firstword $(wildcard $(CURDIR)/../shared/tools/fuse-nfs /work/shared/tools/fuse-nfs))
FUSE_NFS_PREFIX ?= /opt/plumeria-fuse-nfs
deps:
	@command -v fusermount3 >/dev/null 2>&1 || { echo "installing fuse3"; \
		(apt-get update -qq && apt-get install -y -qq fuse3) >/dev/null 2>&1 || echo "warning: could not install fuse3 (FUSE tests will skip)"; }
	@command -v iptables >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 && command -v ip >/dev/null 2>&1 || { echo "installing iptables, iproute2"; \
		(apt-get update -qq && apt-get install -y -qq iptables iproute2) >/dev/null 2>&1 || echo "warning: could not install iptables/iproute2 (the chaos harness will skip)"; }
	@command -v chromium >/dev/null 2>&1 || { echo "installing chromium"; \
		(apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1 || echo "warning: could not install chromium (the dashboard browser test will skip)"; }
	@command -v setfacl >/dev/null 2>&1 && command -v getfacl >/dev/null 2>&1 || { echo "installing acl"; \
		(apt-get update -qq && apt-get install -y -qq acl) >/dev/null 2>&1 || echo "warning: could not install acl (the POSIX ACL test TestFSACL will skip)"; }
	@command -v nfs-ls >/dev/null 2>&1 || { echo "installing libnfs-utils"; \
		(apt-get update -qq && apt-get install -y -qq libnfs-utils) >/dev/null 2>&1 || echo "warning: could not install libnfs-utils (the nfs-ls/nfs-cp tests will skip)"; }
	@if [ -z "$(FUSE_NFS_SRC)" ]; then \
		[ -x $(FUSE_NFS_PREFIX)/bin/fuse-nfs ] || echo "warning: no fuse-nfs source (set FUSE_NFS_SRC) (the NFS-through-FUSE tests will skip)"; \
	else \
		sh deploy/fuse-nfs-build.sh "$(FUSE_NFS_SRC)" $(FUSE_NFS_PREFIX) || echo "warning: could not build fuse-nfs (the NFS-through-FUSE tests will skip)"; \
	fi

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "not gofmt-ed:"; echo "$$out"; exit 1; fi

# test: vet, then every test with the race detector on, including the
# multi-process acceptance tests in test/e2e (they build bin/plumeria; Go's
# test cache does not see that binary change, hence -count=1);
# then the chaos harness's short mode on its own, without the race detector
# (it drives separate processes): TestChaos (3 new seeds × 40 s of faults on
# a cluster in network namespaces; skips plainly where namespaces are not
# usable) and TestCrashPoints (5 SIGKILLs of an fs node on loopback).
CHAOS_PKG := ./test/chaos
test: deps vet build
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v '/test/chaos$$')
	rm -f bin/chaos-summary.txt
	$(GO) test -count=1 -timeout 20m $(CHAOS_PKG) -args -chaos.summary=$(CURDIR)/bin/chaos-summary.txt
	@if [ -f bin/chaos-summary.txt ]; then cat bin/chaos-summary.txt; fi

test-short: build
	$(GO) test -short -timeout 10m ./...

# fuzz runs every fuzz target for FUZZTIME each (default 20s).
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
		done; \
	done

# chaos runs the chaos harness in long mode (root; docs/testing.md): a
# cluster in network namespaces under a seeded fault schedule, then the
# crash-point loop. SEED=N replays a run (give the DURATION it printed);
# FAULTS picks fault kinds (comma-separated, see test/chaos/plan).
# chaos-short: the short mode alone (a few minutes, new seeds), as `make
# test` runs it.
SEED ?= 0
DURATION ?= 10m
FAULTS ?= all
CRASH_ITERATIONS ?= 200
FILE_VERSIONS ?= false
POLICY ?= ec=2+1
CHAOS_RUN ?= TestChaos|TestCrashPoints
chaos: deps
	$(GO) test -count=1 -v -timeout 0 -run '$(CHAOS_RUN)' ./test/chaos/ -args -chaos.long \
		-chaos.seed=$(SEED) -chaos.duration=$(DURATION) -chaos.faults=$(FAULTS) -chaos.crash-iterations=$(CRASH_ITERATIONS) \
		-chaos.file-versions=$(FILE_VERSIONS) -chaos.policy=$(POLICY)

# sim-soak runs the replication core's simulator (brick/repl) over many
# seeds; a failure prints its seed and last events (docs/testing.md).
SIM_SEEDS ?= 20000
sim-soak:
	$(GO) test -count=1 -timeout 0 -run 'TestSimulator$$' ./brick/repl/ -args -sim.seeds=$(SIM_SEEDS)

chaos-short: deps
	$(GO) test -count=1 -v -timeout 20m ./test/chaos/...

bench-vdisk: build
	$(BIN) bench vdisk --size 256MiB

# proto regenerates internal/pb (needs protoc, protoc-gen-go, protoc-gen-go-grpc; see docs/development.md).
proto:
	protoc --go_out=. --go_opt=module=github.com/plumeria-fs/plumeria \
		--go-grpc_out=. --go-grpc_opt=module=github.com/plumeria-fs/plumeria proto/plumeria.proto lock/lockpb/lock.proto

# Containers (docs/operations.md, "Containers"): a three-node cluster from
# deploy/compose.yaml on the bridge network $(PLUMERIA_NET).0/24, reached from
# this host at $(PLUMERIA_NET).11-13:7001. COMPOSE="docker compose" for Compose v2.
IMAGE ?= plumeria:dev
COMPOSE ?= docker-compose
PLUMERIA_NET ?= 172.31.77
CLUSTER_VOLUME ?= default
CLUSTER_COORD := $(PLUMERIA_NET).11:7001,$(PLUMERIA_NET).12:7001,$(PLUMERIA_NET).13:7001
# The cluster's CA (plumeria init, made by cluster-up the first time); the
# CLI commands below and your own use it: export PLUMERIA_CERTS=$(CERTS).
CERTS ?= $(CURDIR)/deploy/certs
CLUSTER := PLUMERIA_IMAGE=$(IMAGE) PLUMERIA_NET=$(PLUMERIA_NET) PLUMERIA_CERTS_DIR=$(CERTS) $(COMPOSE) -f deploy/compose.yaml -p plumeria

# image: the static binary in a FROM scratch image (see Dockerfile).
image: build
	docker build -t $(IMAGE) .

# cluster-up starts (or keeps) the three containers, waits until their three
# bricks are up, and creates and formats $(CLUSTER_VOLUME) unless it exists.
cluster-up: image
	@test -f $(CERTS)/ca.crt || $(BIN) init --certs $(CERTS) --cluster plumeria
	$(CLUSTER) up -d
	@echo "waiting for 3 bricks up at $(CLUSTER_COORD)"; \
	for i in $$(seq 90); do \
		up=$$(PLUMERIA_CERTS=$(CERTS) $(BIN) status --coord $(CLUSTER_COORD) 2>/dev/null | awk '/^BRICK/{b=1;next} /^$$/{b=0} b && $$3=="up"{n++} END{print n+0}'); \
		[ "$$up" = 3 ] && break; \
		[ $$i = 90 ] && { echo "bricks up: $$up of 3 after 90 s; see $(COMPOSE) -p plumeria logs"; exit 1; }; \
		sleep 1; \
	done
	@if PLUMERIA_CERTS=$(CERTS) $(BIN) status --coord $(CLUSTER_COORD) | awk '/^VOLUME/{v=1;next} v && $$1=="$(CLUSTER_VOLUME)"{f=1} END{exit !f}'; then \
		echo "volume $(CLUSTER_VOLUME) exists"; \
	else \
		PLUMERIA_CERTS=$(CERTS) $(BIN) format --coord $(CLUSTER_COORD) --volume $(CLUSTER_VOLUME) --replicas 3; \
	fi
	@echo "mount it: export PLUMERIA_CERTS=$(CERTS); mkdir -p /mnt/plumeria && $(BIN) mount --coord $(CLUSTER_COORD) --volume $(CLUSTER_VOLUME) /mnt/plumeria"

# cluster-down removes the containers and the network; the data volumes stay
# unless VOLUMES=1.
cluster-down:
	$(CLUSTER) down $(if $(VOLUMES),--volumes)

clean:
	rm -rf bin
