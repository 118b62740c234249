# Plumeria. `make test` is what CI runs (see .ci/run and README.md).
GO ?= go
BIN := bin/plumeria
TEST_TIMEOUT ?= 60m

.PHONY: build test test-short vet deps proto fuzz bench-vdisk clean

build:
	CGO_ENABLED=0 $(GO) build -o $(BIN) ./cmd/plumeria

# deps installs what the tests need on a fresh Debian machine, if missing.
deps:
	@command -v fusermount3 >/dev/null 2>&1 || { echo "installing fuse3"; \
		(apt-get update -qq && apt-get install -y -qq fuse3) >/dev/null 2>&1 || echo "warning: could not install fuse3 (FUSE tests will skip)"; }

vet:
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "not gofmt-ed:"; echo "$$out"; exit 1; fi

# test: vet, then every test with the race detector on, including the
# multi-process acceptance tests in test/e2e (they build bin/plumeria).
test: deps vet build
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./...

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

bench-vdisk: build
	$(BIN) bench vdisk --size 256MiB

# proto regenerates internal/pb (needs protoc, protoc-gen-go, protoc-gen-go-grpc; see docs/development.md).
proto:
	protoc --go_out=. --go_opt=module=github.com/plumeria-fs/plumeria \
		--go-grpc_out=. --go-grpc_opt=module=github.com/plumeria-fs/plumeria proto/plumeria.proto lock/lockpb/lock.proto

clean:
	rm -rf bin
