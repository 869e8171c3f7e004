# What the demos share (sourced by scripts/demo-leases.sh and scripts/demo-metrics.sh): output,
# timing, the processes a demo started (the associative array `pids`, by name) and how they
# are stopped, and the local stack.

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }
fail() {
  printf '\n\033[1;31mdemo failed: %s\033[0m\n' "$*" >&2
  exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

started_stack=0
declare -A pids=()

stop_process() { # name: SIGTERM, then SIGKILL after 15 s
  local name="$1" pid="${pids[$1]:-}" i
  [[ -n "$pid" ]] || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      echo "$name (pid $pid) did not stop within 15 s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  wait "$pid" 2>/dev/null || true
  unset "pids[$name]"
}

# Stops every process the demo started, and the stack when the demo started it.
stop_all() {
  local name
  # (Expanded once; `+` keeps an empty array from failing `set -u` on bash before 4.4.)
  for name in ${pids[@]+"${!pids[@]}"}; do
    stop_process "$name"
  done
  if [[ "$started_stack" == 1 ]]; then
    scripts/local-stack.sh stop
  fi
}

wait_until() { # seconds, then a command
  local limit="$1" start
  shift
  start="$(now)"
  until "$@"; do
    if awk -v a="$start" -v b="$(now)" -v l="$limit" 'BEGIN { exit !(b - a > l) }'; then
      return 1
    fi
    sleep 0.5
  done
}

# Starts the local stack unless it runs (then it stays running), and points the AWS
# configuration of everything started from here at it.
use_local_stack() {
  local endpoint="$1"
  say "the local stack (Kinesis and DynamoDB on $endpoint)"
  if scripts/local-stack.sh status >/dev/null 2>&1; then
    echo "already running; it stays running"
  else
    scripts/local-stack.sh start
    started_stack=1
  fi
  # The services load their AWS configuration from the environment, unchanged: this points it
  # at the stack.
  export AWS_ENDPOINT_URL="$endpoint" AWS_REGION=us-east-1
  export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
  unset AWS_PROFILE AWS_SESSION_TOKEN
}
