#!/usr/bin/env bash
# The benchmarks of ruststream-kinesis against the local stack (docs/src/benchmarks.md):
#
#   scripts/bench.sh                      every figure, one Markdown report (about five minutes)
#   scripts/bench.sh all --quick          one repetition each: a smoke run
#   scripts/bench.sh consume              one figure (see `kinesis-bench --help` for the list)
#
# Starts the local stack when it is not running (and stops it again at the end), builds the
# benchmark binary in release mode, runs it, and writes the report to
# target/kinesis-bench/report.md as well as to standard output.
set -euo pipefail
cd "$(dirname "$0")/.."

started=0
if ! scripts/local-stack.sh status >/dev/null 2>&1; then
  scripts/local-stack.sh start
  started=1
fi
cleanup() {
  if [[ "$started" == 1 ]]; then
    scripts/local-stack.sh stop
  fi
}
trap cleanup EXIT

export KINESIS_TEST_ENDPOINT=http://127.0.0.1:4566
export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1

args=("$@")
if [[ ${#args[@]} -eq 0 ]]; then
  args=(all)
fi
mkdir -p target/kinesis-bench
cargo run --release -p kinesis-bench -- "${args[@]}" --out target/kinesis-bench/report.md
