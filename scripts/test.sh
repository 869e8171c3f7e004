#!/usr/bin/env bash
# The whole test suite: starts the local stack (installing it when missing), runs formatting,
# the module graph (no import cycle), lints, the book's checks, every test with the live tests
# required (the facts of the guide among them: docs_facts, and its Rust blocks as doctests), the
# Getting started page followed from an empty folder, and stops the stack again. Each phase says
# how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
phase() {
  printf '\n==> [%4d s] %s\n' "$((SECONDS - started))" "$*" >&2
}

for component in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
    rustup component add "$component"
  fi
done

phase "local stack"
scripts/local-stack.sh start
trap 'scripts/local-stack.sh stop' EXIT

# A build from a clean clone gains nothing from incremental state, and full debug info makes each
# of the two dozen test binaries about 320 MB: together they once filled the disk of CI's machine
# (the run of c8a8eaa died linking, "No space left on device"). Line tables keep backtraces useful.
export CARGO_INCREMENTAL=0
export CARGO_PROFILE_DEV_DEBUG=line-tables-only
export KINESIS_TEST_ENDPOINT=http://127.0.0.1:4566
export KINESIS_TEST_STRICT=1
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1

phase "format and module graph"
cargo fmt --all -- --check
# The crate's modules import one another one way only: the graph, and a failure on a cycle.
python3 scripts/module-graph.py
phase "clippy"
cargo clippy --all-targets --all-features -- -D warnings
# A service builds the crate with its default features: code behind a feature must not be needed
# without it.
cargo clippy -p ruststream-kinesis -- -D warnings
phase "the book"
scripts/docs.sh
phase "tests"
cargo test --all-features --all-targets
phase "doctests (the API's and the guide's)"
cargo test --all-features --doc
phase "the AsyncAPI document"
# The demo service's AsyncAPI command prints the document kept in the docs.
scripts/check-asyncapi.sh
phase "the Getting started page, from an empty folder"
scripts/check-getting-started.sh
phase "done"
