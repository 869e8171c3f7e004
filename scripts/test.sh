#!/usr/bin/env bash
# The whole test suite: starts the local stack (installing it when missing), runs formatting,
# the module graph (no import cycle), lints and every test with the live tests required, and
# stops the stack again.
set -euo pipefail
cd "$(dirname "$0")/.."

for component in rustfmt clippy; do
  if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
    rustup component add "$component"
  fi
done

scripts/local-stack.sh start
trap 'scripts/local-stack.sh stop' EXIT

export KINESIS_TEST_ENDPOINT=http://127.0.0.1:4566
export KINESIS_TEST_STRICT=1
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1

cargo fmt --all -- --check
# The crate's modules import one another one way only: the graph, and a failure on a cycle.
python3 scripts/module-graph.py
cargo clippy --all-targets --all-features -- -D warnings
# A service builds the crate with its default features: code behind a feature must not be needed
# without it.
cargo clippy -p ruststream-kinesis -- -D warnings
scripts/docs.sh
cargo test --all-features --all-targets
cargo test --all-features --doc
# The demo service's AsyncAPI command prints the document kept in the docs.
scripts/check-asyncapi.sh
