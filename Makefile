# Linefactory — the two commands a newcomer needs: `make run` and `make test`.
export GOTOOLCHAIN := local
GO        ?= go
BIN       ?= bin
# FACTORY_DATA_DIR (and every other FACTORY_* variable) is taken from the
# environment: FACTORY_DATA_DIR=/x make run uses /x.
DATA_DIR  ?= $(or $(FACTORY_DATA_DIR),.factory)
# make run serves the example configuration (agent harnesses and models), so
# every example deploys; FACTORY_CONFIG=/path/factory.toml make run overrides it.
CONFIG    ?= $(or $(FACTORY_CONFIG),manifests/examples/factory.toml)

# Packages that do not link the Temporal server run with the race detector;
# the few that do (cmd/...) build once without it (a -race build of the server
# is several times slower).
RACE_PKGS := ./manifests/... ./store/... ./admit/... ./api/... ./activities/... ./workflows/... ./internal/...
SERVER_PKGS := ./cmd/...

STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
WORKFLOWCHECK := go.temporal.io/sdk/contrib/tools/workflowcheck@v0.6.0

.PHONY: run test bench lint build fmt clean

## run: build and start API + worker + embedded Temporal (+ Web UI) on a SQLite store
run:
	@echo "==> building $(BIN)/factoryd and $(BIN)/factoryctl"
	@test -x $(BIN)/factoryd || echo "    (the first build compiles the embedded Temporal server: a few minutes; later builds take seconds)"
	@$(MAKE) --no-print-directory build
	@echo "==> starting $(BIN)/factoryd serve with data dir $(DATA_DIR) and server configuration $(CONFIG)"
	@FACTORY_DATA_DIR=$(DATA_DIR) FACTORY_CONFIG=$(CONFIG) ./$(BIN)/factoryd serve

## test: every test; PostgreSQL tests run when FACTORY_TEST_POSTGRES_DSN is set
test:
	@if [ -z "$$FACTORY_TEST_POSTGRES_DSN" ]; then echo "NOTE: FACTORY_TEST_POSTGRES_DSN is unset: PostgreSQL tests will be skipped"; fi
	$(GO) test -race -count=1 -timeout 20m $(RACE_PKGS)
	$(GO) test -count=1 -timeout 40m $(SERVER_PKGS)

## bench: what users feel, Linefactory against bare Temporal in one process (see README, Performance)
bench:
	@if [ -z "$$FACTORY_TEST_POSTGRES_DSN" ]; then echo "NOTE: FACTORY_TEST_POSTGRES_DSN is unset: the PostgreSQL rows are skipped"; fi
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 30m ./cmd/factoryd/

## lint: go vet, staticcheck and workflowcheck (pinned versions)
lint:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(WORKFLOWCHECK) ./workflows/...

## build: the factoryd and factoryctl binaries into ./bin
build:
	$(GO) build -o $(BIN)/factoryd ./cmd/factoryd
	$(GO) build -o $(BIN)/factoryctl ./cmd/factoryctl

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)
