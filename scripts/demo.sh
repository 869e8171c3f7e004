#!/usr/bin/env bash
# The one-instance demo (the main job is scripts/demo-leases.sh): a demo service on the local stack that publishes orders and consumes them,
# printing each one it handles. Starts the stack when it is not running, and stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."

started=0
if ! scripts/local-stack.sh status >/dev/null 2>&1; then
  scripts/local-stack.sh start
  started=1
fi
cleanup() { if [ "$started" = 1 ]; then scripts/local-stack.sh stop; fi; }
trap cleanup EXIT

export KINESIS_TEST_ENDPOINT=http://127.0.0.1:4566
cargo run -p ruststream-kinesis --example demo
