#!/usr/bin/env bash
# The metrics of two instances across a handover, in one command, on the local stack:
#
#   1. starts the stack when it is not running (and stops it at the end only then),
#   2. creates a lease table (a new one per run) and starts two instances of the warehouse
#      service (examples/warehouse, feature `metrics`), pod-a serving /metrics on
#      127.0.0.1:9464 and pod-b on 127.0.0.1:9465, and a producer of orders,
#   3. prints a scrape of both while pod-a holds every shard,
#   4. stops pod-a and prints both scrapes again once pod-b holds every shard.
#
# Exits non-zero when the leases held (`aws_kinesis_leases_held`) do not move from pod-a to pod-b
# within DEMO_TAKEOVER_TIMEOUT seconds (30). Logs: target/demo-metrics/. The dashboard for these
# series: docs/grafana/ruststream-kinesis.json.
set -euo pipefail
cd "$(dirname "$0")/.."

TAKEOVER_TIMEOUT="${DEMO_TAKEOVER_TIMEOUT:-30}"
ENDPOINT="http://127.0.0.1:${LOCAL_STACK_PORT:-4566}"
TABLE="warehouse-metrics-$(date +%s)"
LOGS=target/demo-metrics
WAREHOUSE=target/debug/examples/warehouse
LEASE_TABLE=target/debug/lease-table
declare -A ADDR=([pod-a]=127.0.0.1:9464 [pod-b]=127.0.0.1:9465)

# shellcheck source=scripts/demo-lib.sh
source scripts/demo-lib.sh
trap stop_all EXIT
trap 'exit 130' INT TERM

use_local_stack "$ENDPOINT"

say "building the warehouse service (with its /metrics route) and the lease-table tool"
cargo build -q -p lease-table
cargo build -q -p ruststream-kinesis --features dynamodb-lease,metrics --example warehouse
rm -rf "$LOGS"
mkdir -p "$LOGS"

scrape() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("http://" + sys.argv[1] + "/metrics", timeout=5).read().decode())' "${ADDR[$1]}"; }
# The value of the series `$2` (labels included, as rendered) in `$1`'s scrape; 0 when missing.
value() { scrape "$1" 2>/dev/null | awk -v s="$2" 'index($0, s " ") == 1 { print $2; found = 1 } END { if (!found) print 0 }'; }
held() { value "$1" "aws_kinesis_leases_held{owner=\"$1\",stream=\"warehouse-orders\"}"; }
holds() { [[ "$(held "$1")" == "$2" ]]; }
# The broker's series of `$1`'s scrape that say who holds what and how far behind it reads.
show() {
  echo "  $1 (http://${ADDR[$1]}/metrics):"
  scrape "$1" | grep -E '^aws_kinesis_(leases_held|shard_behind_seconds|lease_events_total|records_read_total)' |
    sed "s/^/    /" || echo "    (none of these: it has held no lease yet)"
}

say "creating the lease table $TABLE"
"$LEASE_TABLE" "$TABLE" --create

for pod in pod-a pod-b; do
  say "starting $pod, its metrics on http://${ADDR[$pod]}/metrics"
  WAREHOUSE_OWNER="$pod" WAREHOUSE_METRICS_ADDR="${ADDR[$pod]}" "$WAREHOUSE" "$TABLE" >"$LOGS/$pod.log" 2>&1 &
  pids[$pod]=$!
  if [[ "$pod" == pod-a ]]; then
    wait_until 60 holds pod-a 2 || {
      cat "$LOGS/pod-a.log" >&2
      fail "pod-a did not report two leases held within 60 s"
    }
  fi
done
wait_until 30 scrape pod-b >/dev/null || fail "pod-b serves no /metrics"

say "a producer: one order every 200 ms"
"$WAREHOUSE" produce --every 200 >"$LOGS/producer.log" 2>&1 &
pids[producer]=$!
sleep 4

say "before the handover: pod-a holds both shards, pod-b stands by"
show pod-a
show pod-b

say "stopping pod-a (SIGTERM): final checkpoints, leases released"
stopped_at="$(now)"
# Its last scrape: the process and its route go with it.
stop_process pod-a
wait_until "$TAKEOVER_TIMEOUT" holds pod-b 2 ||
  fail "pod-b did not report two leases held $TAKEOVER_TIMEOUT s after pod-a began to stop"
echo "pod-b reports both leases held, $(since "$stopped_at") s after pod-a began to stop"
sleep 3

say "after the handover: pod-b holds both shards and reads on"
show pod-b
stop_process producer
stop_process pod-b
echo "logs: $LOGS/pod-a.log $LOGS/pod-b.log $LOGS/producer.log"
