# Set-up and checks for a fresh Debian machine (run as root: FUSE mounts need it).
SHELL   := /bin/bash
GO      ?= go
BIN     ?= bin/mlfsd
DEMO    ?= /tmp/mlfsd-demo

.PHONY: deps build test test-stress demo lint

# Debian packages the tests and the demo need (fuse3, ...), installed once.
deps:
	@pkgs=$$(grep -v '^\s*#' .ci/apt-packages.txt | xargs); \
	missing=""; for p in $$pkgs; do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi
	@[ -e /dev/fuse ] || modprobe fuse

build:
	$(GO) build -o $(BIN) ./cmd/mlfsd

# The packages `make test` runs (all of them unless narrowed, e.g. PKGS=./internal/...).
PKGS ?= ./...

# Where `make test` keeps go test's JSON events (per-test timings) for a look later.
TESTJSON ?= /tmp/mlfsd-test.json

# The test command: every package, with the race detector. Output is plain go test's,
# then the slowest tests and packages (.ci/testreport), then go test's closing lines, and
# last, if anything failed, the failing tests by name with the command that reruns each.
# It takes about 9 minutes on a 2-core machine (most of it cmd/mlfsd); see README.
# The timeout is a hang guard, not a speed limit: on a busy 2-core machine the largest
# package takes several times its quiet 2-3 minutes.
# -p 4, not the default of one package per CPU: two packages spend about three minutes
# each waiting for short-lived credentials to expire (backends/oss/refreshtest, the
# Kerberos renewal test in backends/hdfs), using little CPU; with -p 2 they held both
# slots and cmd/mlfsd started only after 5 of its 11 minutes.
test: deps
	$(GO) vet $(PKGS) ./.ci/testreport ./.ci/memhog
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) test ./.ci/testreport
	$(GO) build -o bin/testreport ./.ci/testreport
	set -o pipefail; $(GO) test -race -p 4 -timeout 30m -json $(PKGS) | tee $(TESTJSON) | bin/testreport

# The suite under load: two fresh clones of HEAD run `make test` side by side
# while a memory hog (.ci/memhog) holds half of the machine's memory; fails if
# either run fails, and names the files that keep each run's output. About
# twice as long as `make test`. STRESS_PKGS narrows the packages (a dry run:
# STRESS_PKGS=./internal/... STRESS_MEM_FRACTION=0.05); see .ci/test-stress.
test-stress:
	./.ci/test-stress

# The quickstart: an example training job on local directories, no cloud account.
demo: deps build
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	./examples/quickstart/run.sh $(BIN) $(DEMO)
