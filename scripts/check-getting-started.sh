#!/usr/bin/env bash
# Follows the Getting started page's "Your own service, from an empty folder" on the local stack
# (which must be running): an empty folder beside a checkout of this repository gets the page's
# Cargo.toml and src/main.rs (docs/getting-started/, which the page includes), the lease table is
# created with the checkout's lease-table tool, two instances start (pod-a, then pod-b), twenty
# orders are published, and the check waits until each instance holds one of the two shards and
# every order was picked once. It fails naming the step that did not happen.
#
# Two liberties, neither of which changes what runs: the service shares this workspace's
# Cargo.lock and target folder (the same versions, so the dependencies already built are not
# built again), and the "checkout" beside the folder is a link to this repository.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

work="$(mktemp -d)"
cleanup() {
  local pid
  for pid in ${pids:-}; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in ${pids:-}; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
pids=""

say() { printf 'getting-started: %s\n' "$*" >&2; }
fail() {
  say "FAILED: $*"
  for log in "$work"/*.log; do
    [ -f "$log" ] || continue
    say "--- $(basename "$log") (last lines)"
    sed 's/\x1b\[[0-9;]*m//g' "$log" | tail -n 20 >&2
  done
  exit 1
}

# The page's layout: the checkout and the service's folder side by side.
ln -s "$ROOT" "$work/ruststream-kinesis"
mkdir -p "$work/warehouse/src"
cp docs/getting-started/Cargo.toml "$work/warehouse/Cargo.toml"
cp docs/getting-started/src/main.rs "$work/warehouse/src/main.rs"
cp Cargo.lock "$work/warehouse/Cargo.lock"
export CARGO_TARGET_DIR="$ROOT/target"

export AWS_ENDPOINT_URL="${KINESIS_TEST_ENDPOINT:-http://127.0.0.1:4566}" AWS_REGION=us-east-1 \
  AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
unset AWS_PROFILE

say "building the service in an empty folder"
(cd "$work/warehouse" && cargo build --quiet) || fail "the page's service does not build"
service="$CARGO_TARGET_DIR/debug/warehouse"

say "creating the lease table"
cargo run --quiet --manifest-path "$work/ruststream-kinesis/Cargo.toml" -p lease-table -- \
  warehouse-leases --create >"$work/table.log" 2>&1 || fail "lease-table --create"

say "starting pod-a, then pod-b (which asks pod-a for one of the two shards)"
(cd "$work/warehouse" && POD_NAME=pod-a exec "$service" >"$work/pod-a.log" 2>&1) &
pids="$pids $!"
sleep 3
(cd "$work/warehouse" && POD_NAME=pod-b exec "$service" >"$work/pod-b.log" 2>&1) &
pids="$pids $!"

view() {
  cargo run --quiet --manifest-path "$work/ruststream-kinesis/Cargo.toml" -p lease-table -- \
    warehouse-leases --json 2>/dev/null
}
# What the instances logged, without the colours of a terminal.
logged() { sed 's/\x1b\[[0-9;]*m//g' "$work/$1.log"; }

say "waiting until each instance holds one of the two shards"
owners=""
for _ in $(seq 1 90); do
  owners=$(view | python3 -c '
import json, sys
rows = json.load(sys.stdin)["rows"]
print(" ".join(sorted(row["owner"] for row in rows if row.get("stream") == "orders" and row.get("owner"))))
' 2>/dev/null || true)
  [ "$owners" = "pod-a pod-b" ] && break
  sleep 1
done
[ "$owners" = "pod-a pod-b" ] || fail "the shards of orders are held by [$owners], not one each by pod-a and pod-b"

say "publishing twenty orders"
(cd "$work/warehouse" && "$service" produce 20 >"$work/produce.log" 2>&1) ||
  fail "the producer did not publish"

say "waiting until every order was picked"
for _ in $(seq 1 60); do
  picked=$( (logged pod-a; logged pod-b) | grep -c "order picked" || true)
  [ "$picked" -ge 20 ] && break
  sleep 1
done
ids=$( (logged pod-a; logged pod-b) | grep "order picked" |
  sed -n 's/.*order\.id=\([0-9]*\).*/\1/p' | sort -n)
unique=$(printf '%s\n' "$ids" | sort -nu | grep -c . || true)
total=$(printf '%s\n' "$ids" | grep -c . || true)
[ "$unique" -eq 20 ] && [ "$total" -eq 20 ] || fail "orders picked: $total, distinct: $unique (want 20 and 20)"
a=$(logged pod-a | grep -c "order picked" || true)
b=$(logged pod-b | grep -c "order picked" || true)
[ "$a" -gt 0 ] && [ "$b" -gt 0 ] || fail "pod-a picked $a orders and pod-b $b: one of them read nothing"
say "ok: pod-a and pod-b hold a shard each; 20 orders picked once each (pod-a $a, pod-b $b)"
