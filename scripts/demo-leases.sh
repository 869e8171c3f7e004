#!/usr/bin/env bash
# The lease story in one command, on the local stack:
#
#   1. starts the stack when it is not running (and stops it at the end only then),
#   2. creates a lease table in DynamoDB (a new one per run),
#   3. starts two instances of the warehouse service (examples/warehouse), pod-a and pod-b, on the
#      same table and stream, and a producer of orders,
#   4. shows who holds which shard with the lease-table view (crates/lease-table),
#   5. stops pod-a (SIGTERM: final checkpoints, leases released) and shows pod-b take
#      its shards over and resume after pod-a's checkpoints,
#   6. stops everything it started, and checks that every order was picked exactly once.
#
# Exits non-zero when pod-b has not taken every shard within DEMO_TAKEOVER_TIMEOUT seconds (30),
# or when an order was lost or picked twice. Logs: target/demo-leases/.
set -euo pipefail
cd "$(dirname "$0")/.."

TAKEOVER_TIMEOUT="${DEMO_TAKEOVER_TIMEOUT:-30}"
ENDPOINT="http://127.0.0.1:${LOCAL_STACK_PORT:-4566}" # the stack's port, as scripts/local-stack.sh reads it
STREAM=warehouse-orders
TABLE="warehouse-demo-$(date +%s)"
LOGS=target/demo-leases
WAREHOUSE=target/debug/examples/warehouse
LEASE_TABLE=target/debug/lease-table

# shellcheck source=scripts/demo-lib.sh
source scripts/demo-lib.sh
trap stop_all EXIT
trap 'exit 130' INT TERM

use_local_stack "$ENDPOINT"

say "building the warehouse service and the lease-table view"
cargo build -q -p lease-table
cargo build -q -p ruststream-kinesis --features dynamodb-lease --example warehouse
rm -rf "$LOGS"
mkdir -p "$LOGS"

view() { "$LEASE_TABLE" "$TABLE" | sed 's/^/    /'; }
# The owner column of every row of the stream, one per line ("-" for a released row).
owners() { "$LEASE_TABLE" "$TABLE" 2>/dev/null | awk -v s="$STREAM" '$1 == s { print $3 }'; }
# Whether the table has at least two rows of the stream and `$1` owns every one.
all_held_by() {
  local rows
  rows="$(owners)"
  [[ "$(grep -c . <<<"$rows")" -ge 2 ]] && ! grep -qvx -- "$1" <<<"$rows"
}
picked() { grep -o 'order picked order.id=[0-9]*' "$LOGS/$1.log" | sed 's/.*=//' || true; }

say "creating the lease table $TABLE"
"$LEASE_TABLE" "$TABLE" --create

say "starting pod-a (it creates $STREAM with two shards when missing)"
WAREHOUSE_OWNER=pod-a "$WAREHOUSE" "$TABLE" >"$LOGS/pod-a.log" 2>&1 &
pids[pod-a]=$!
wait_until 60 all_held_by pod-a || {
  cat "$LOGS/pod-a.log" >&2
  fail "pod-a did not take the shards of $STREAM within 60 s"
}
view

say "starting pod-b on the same table and stream"
WAREHOUSE_OWNER=pod-b "$WAREHOUSE" "$TABLE" >"$LOGS/pod-b.log" 2>&1 &
pids[pod-b]=$!
sleep 3
kill -0 "${pids[pod-b]}" 2>/dev/null || {
  cat "$LOGS/pod-b.log" >&2
  fail "pod-b exited"
}
echo "pod-a listed first and took every free shard; pod-b found them held and stands by."
echo "(The instances do not balance shards: a shard moves when its holder stops or its lease lapses.)"
view

say "starting a producer: one order every 200 ms, partition key = SKU"
"$WAREHOUSE" produce --every 200 >"$LOGS/producer.log" 2>&1 &
pids[producer]=$!
sleep 5
echo "orders picked so far: pod-a $(picked pod-a | grep -c .), pod-b $(picked pod-b | grep -c .)"
grep 'order picked' "$LOGS/pod-a.log" | tail -n 3 | sed 's/^/    pod-a: /'
view

say "stopping pod-a (SIGTERM): it writes its final checkpoints and releases its leases"
stopped_at="$(now)"
stop_process pod-a
echo "pod-a stopped in $(since "$stopped_at") s; its last orders:"
grep 'order picked' "$LOGS/pod-a.log" | tail -n 3 | sed 's/^/    pod-a: /'
view

say "waiting for pod-b to take the shards over (it looks at the lease table every second)"
wait_until "$TAKEOVER_TIMEOUT" all_held_by pod-b ||
  fail "pod-b did not hold every shard $TAKEOVER_TIMEOUT s after pod-a stopped"
takeover="$(since "$stopped_at")"
echo "pod-b holds every shard, $takeover s after pod-a began to stop"
view
sleep 3
echo "pod-b resumed after pod-a's checkpoints; its first orders:"
grep 'order picked' "$LOGS/pod-b.log" | head -n 4 | sed 's/^/    pod-b: /'

say "stopping the producer, and pod-b once it has picked every order"
stop_process producer
published="$(grep -o '^published order [0-9]*' "$LOGS/producer.log" | awk '{ print $3 }' | sort -n)"
[[ -n "$published" ]] || fail "the producer published nothing; see $LOGS/producer.log"
all_picked() { [[ -z "$(comm -23 <(sort -u <<<"$published") <(cat <(picked pod-a) <(picked pod-b) | sort -u))" ]]; }
wait_until 30 all_picked || true
stop_process pod-b
view

say "what happened"
# Only this run's producer is counted: another producer may share the stream.
mine() { grep -Fx -f <(printf '%s\n' "$published") || true; }
a="$(picked pod-a | mine)"
b="$(picked pod-b | mine)"
count() { grep -c . <<<"$1" || true; }
echo "published $(count "$published") orders; pod-a picked $(count "$a"), pod-b picked $(count "$b")"
echo "pod-b held every shard $takeover s after pod-a began to stop (limit $TAKEOVER_TIMEOUT s)"
lost="$(comm -23 <(sort -u <<<"$published") <(printf '%s\n%s\n' "$a" "$b" | grep . | sort -u))"
twice="$(printf '%s\n%s\n' "$a" "$b" | grep . | sort | uniq -d)"
[[ -z "$lost" ]] || fail "orders never picked: $(tr '\n' ' ' <<<"$lost")"
[[ -z "$twice" ]] || fail "orders picked twice: $(tr '\n' ' ' <<<"$twice")"
echo "every order was picked exactly once: the handover after the release read nothing twice"
echo "logs: $LOGS/pod-a.log $LOGS/pod-b.log $LOGS/producer.log"
