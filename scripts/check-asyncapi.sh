#!/usr/bin/env bash
# The demo service's AsyncAPI command (`warehouse asyncapi gen`) prints the document kept in
# docs/asyncapi/warehouse.json: run with the environment of a service in eu-west-1, its output
# must equal the snapshot (compared as JSON). The example's own test compares the document the
# service builds; this checks the command a user runs.
set -euo pipefail
cd "$(dirname "$0")/.."

printed=$(mktemp)
trap 'rm -f "$printed"' EXIT
AWS_REGION=eu-west-1 AWS_ENDPOINT_URL=https://kinesis.eu-west-1.amazonaws.com \
  cargo run -q -p ruststream-kinesis --all-features --example warehouse -- asyncapi gen -o "$printed"
if ! python3 - "$printed" docs/asyncapi/warehouse.json <<'PY'
import json, sys
printed, kept = (json.load(open(path)) for path in sys.argv[1:3])
sys.exit(0 if printed == kept else 1)
PY
then
  echo "warehouse asyncapi gen printed a document other than docs/asyncapi/warehouse.json:" >&2
  diff <(python3 -m json.tool --sort-keys "$printed") \
       <(python3 -m json.tool --sort-keys docs/asyncapi/warehouse.json) >&2 || true
  exit 1
fi
echo "warehouse asyncapi gen: the document matches docs/asyncapi/warehouse.json"
