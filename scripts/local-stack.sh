#!/usr/bin/env bash
# Local Kinesis + DynamoDB test stack without Docker: one LocalStack-like endpoint on
# http://127.0.0.1:4566 serving both APIs.
#
#   scripts/local-stack.sh start    install when missing, start (idempotent), wait until healthy
#   scripts/local-stack.sh stop     stop what start started (idempotent)
#   scripts/local-stack.sh status   show each process and the endpoint's health (exit 1 unless healthy)
#   scripts/local-stack.sh env      print the exports for tests:  eval "$(scripts/local-stack.sh env)"
#   scripts/local-stack.sh install  only install (also done by start)
#   scripts/local-stack.sh restart  stop, then start
#   scripts/local-stack.sh logs     tail every log
#
# Pieces, all on 127.0.0.1 only, everything under .local-stack/ (git-ignored):
#   router        127.0.0.1:4566  scripts/stack-router.js (Node, builtin http only): X-Amz-Target
#                                 Kinesis_20131202.* -> kinesis-mock, DynamoDB_20120810.* -> moto,
#                                 GET /health and /_localstack/health like LocalStack, and a fault
#                                 injector that tests drive at run time through /_faults (latency,
#                                 errors, throttling, lost answers, resets, hangs; see
#                                 docs/src/fault-injector.md). The emulators never fail on their own.
#   kinesis-mock  127.0.0.1:4567  (TLS 127.0.0.1:4569) npm kinesis-local@0.6.2, started from a copy
#                                 of its main.js whose hard-coded bind address 0.0.0.0 is patched to
#                                 127.0.0.1 at install time
#   moto          127.0.0.1:4568  moto 5.2.1 server mode (DynamoDB) in .local-stack/venv
# The same virtualenv has AWS's KPL aggregation library, aws-kinesis-agg 1.2.3 (PyPI), for the
# interop tests of the KPL format (scripts/kpl-agg.py).
# Both emulators keep everything in memory: each start is empty. Both answer ARNs in account
# 123456789012 (moto's default; kinesis-mock is started with AWS_ACCOUNT_ID set to it). A request
# with the header x-moto-account-id reaches another account in moto.
#
# Settings (environment): LOCAL_STACK_PORT (4566), LOCAL_STACK_KINESIS_PORT (4567),
# LOCAL_STACK_KINESIS_TLS_PORT (4569), LOCAL_STACK_DYNAMODB_PORT (4568),
# LOCAL_STACK_START_TIMEOUT (60 s), LOCAL_STACK_SHARD_LIMIT (1000: kinesis-bench cost opens 256 shards at once), LOCAL_STACK_DIR (.local-stack),
# LOCAL_STACK_VERBOSE=1 (log every request in moto and the router). STACK_ROUTER_LOG_FAULTS=1 in the
# environment of start logs each fault the router injects (it always logs fault rules added and removed).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STACK_DIR="${LOCAL_STACK_DIR:-$ROOT/.local-stack}"
ROUTER_JS="$ROOT/scripts/stack-router.js"

ROUTER_PORT="${LOCAL_STACK_PORT:-4566}"
KINESIS_PORT="${LOCAL_STACK_KINESIS_PORT:-4567}"
DYNAMODB_PORT="${LOCAL_STACK_DYNAMODB_PORT:-4568}"
KINESIS_TLS_PORT="${LOCAL_STACK_KINESIS_TLS_PORT:-4569}"
START_TIMEOUT="${LOCAL_STACK_START_TIMEOUT:-60}"
SHARD_LIMIT="${LOCAL_STACK_SHARD_LIMIT:-1000}"
# One account for both emulators, moto's default (moto names it in every table's ARN): an
# exactly-once subscription refuses a lease table in another account than its stream.
ACCOUNT_ID=123456789012
VERBOSE="${LOCAL_STACK_VERBOSE:-0}"

KINESIS_LOCAL_VERSION=0.6.2
MOTO_VERSION=5.2.1
AGG_VERSION=1.2.3

KINESIS_DIR="$STACK_DIR/kinesis"
KINESIS_PKG="$KINESIS_DIR/node_modules/kinesis-local"
KINESIS_JS="$KINESIS_PKG/kinesis-mock-loopback.js"
KINESIS_STAMP="$KINESIS_DIR/.installed-kinesis-local-$KINESIS_LOCAL_VERSION"
VENV="$STACK_DIR/venv"
VENV_STAMP="$VENV/.installed-moto-$MOTO_VERSION"

ENDPOINT="http://127.0.0.1:$ROUTER_PORT"
COMPONENTS=(kinesis dynamodb router) # start order; stop goes in reverse

log() { printf 'local-stack: %s\n' "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}
need() {
  local cmd
  for cmd in "$@"; do
    command -v "$cmd" >/dev/null 2>&1 || die "'$cmd' is required but not found on PATH"
  done
}

pidfile() { echo "$STACK_DIR/$1.pid"; }
logfile() { echo "$STACK_DIR/$1.log"; }

# A string that the component's command line contains; guards against a recycled pid.
signature() {
  case "$1" in
    kinesis) echo "kinesis-mock-loopback.js" ;;
    dynamodb) echo "moto.server" ;;
    router) echo "stack-router.js" ;;
  esac
}

ports_of() {
  case "$1" in
    kinesis) echo "$KINESIS_PORT $KINESIS_TLS_PORT" ;;
    dynamodb) echo "$DYNAMODB_PORT" ;;
    router) echo "$ROUTER_PORT" ;;
  esac
}

# Prints the pid of a running component started by this script, or fails.
running_pid() {
  local f pid args
  f="$(pidfile "$1")"
  [[ -f "$f" ]] || return 1
  pid="$(tr -dc '0-9' <"$f")"
  [[ -n "$pid" ]] || return 1
  args="$(ps -ww -p "$pid" -o args= 2>/dev/null)" || return 1
  [[ "$args" == *"$(signature "$1")"* ]] || return 1
  echo "$pid"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

http_code() { curl -s -o /dev/null -m 2 -w '%{http_code}' "$@" 2>/dev/null || true; }

component_ready() {
  case "$1" in
    kinesis) [[ "$(http_code "http://127.0.0.1:$KINESIS_PORT/healthcheck")" == 200 ]] ;;
    dynamodb)
      # A real DynamoDB ListTables (moto picks the service from the credential scope).
      [[ "$(http_code -X POST "http://127.0.0.1:$DYNAMODB_PORT/" \
        -H 'X-Amz-Target: DynamoDB_20120810.ListTables' -H 'Content-Type: application/x-amz-json-1.0' \
        -H 'Authorization: AWS4-HMAC-SHA256 Credential=test/20000101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
        -d '{}')" == 200 ]]
      ;;
    router) [[ "$(http_code "$ENDPOINT/health")" =~ ^(200|503)$ ]] ;; # answers (503: a backend is down)
  esac
}

# ---------------------------------------------------------------------------------------------
# install

install_kinesis() {
  if [[ -f "$KINESIS_STAMP" && -f "$KINESIS_JS" ]]; then return 0; fi
  need node npm
  log "installing kinesis-local@$KINESIS_LOCAL_VERSION (kinesis-mock) into $KINESIS_DIR"
  mkdir -p "$KINESIS_DIR"
  npm install --prefix "$KINESIS_DIR" --no-audit --no-fund --loglevel=error \
    "kinesis-local@$KINESIS_LOCAL_VERSION" >&2 || die "npm install kinesis-local@$KINESIS_LOCAL_VERSION failed"
  local main="$KINESIS_PKG/main.js" version
  [[ -f "$main" && -f "$KINESIS_PKG/server.json" ]] || die "$main or its server.json is missing after npm install"
  version="$(node -p "require('$KINESIS_PKG/package.json').version")"
  [[ "$version" == "$KINESIS_LOCAL_VERSION" ]] || die "installed kinesis-local is $version, wanted $KINESIS_LOCAL_VERSION"

  # kinesis-mock binds its servers to a hard-coded 0.0.0.0 (one literal: Host.fromString("0.0.0.0"),
  # compiled to `$m_Lcom_comcast_ip4s_Host$().em("0.0.0.0")`) and has no setting for it. Patch the
  # literal in a copy of main.js so that both its plain and TLS ports bind to loopback only.
  local needle='$m_Lcom_comcast_ip4s_Host$().em("0.0.0.0")'
  local hits
  hits="$(grep -o -F "$needle" "$main" | wc -l)"
  [[ "$hits" -eq 1 ]] || die "expected exactly one '$needle' in $main, found $hits: cannot patch its bind address"
  sed 's/\$m_Lcom_comcast_ip4s_Host\$()\.em("0\.0\.0\.0")/$m_Lcom_comcast_ip4s_Host$().em("127.0.0.1")/' \
    "$main" >"$KINESIS_JS.tmp"
  if grep -q -F '0.0.0.0' "$KINESIS_JS.tmp" ||
    [[ "$(grep -o -F '$m_Lcom_comcast_ip4s_Host$().em("127.0.0.1")' "$KINESIS_JS.tmp" | wc -l)" -ne 1 ]]; then
    rm -f "$KINESIS_JS.tmp"
    die "patching the bind address of $main failed"
  fi
  mv "$KINESIS_JS.tmp" "$KINESIS_JS"
  touch "$KINESIS_STAMP"
  log "kinesis-mock installed; bind address patched to 127.0.0.1 in $KINESIS_JS"
}

install_moto() {
  if [[ -f "$VENV_STAMP" && -x "$VENV/bin/python" ]]; then return 0; fi
  need python3
  log "installing moto $MOTO_VERSION (DynamoDB) into the virtualenv $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV" >&2 ||
    die "python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)"
  "$VENV/bin/python" -m pip install --disable-pip-version-check --quiet \
    "moto[dynamodb,kinesis]==$MOTO_VERSION" "flask>=3,<4" "flask-cors>=4,<7" >&2 ||
    die "pip install moto[dynamodb,kinesis]==$MOTO_VERSION failed"
  "$VENV/bin/python" -c 'import moto.server, boto3, flask, flask_cors' ||
    die "moto server mode does not import in $VENV"
  touch "$VENV_STAMP"
  log "moto installed"
}

install_agg() {
  if "$VENV/bin/python" -c 'import aws_kinesis_agg' 2>/dev/null; then return 0; fi
  log "installing aws-kinesis-agg $AGG_VERSION (AWS's KPL aggregation library) into $VENV"
  "$VENV/bin/python" -m pip install --disable-pip-version-check --quiet \
    "aws-kinesis-agg==$AGG_VERSION" >&2 ||
    die "pip install aws-kinesis-agg==$AGG_VERSION failed"
  "$VENV/bin/python" -c 'from aws_kinesis_agg import aggregator, deaggregator' ||
    die "aws-kinesis-agg does not import in $VENV"
  log "aws-kinesis-agg installed"
}

cmd_install() {
  mkdir -p "$STACK_DIR"
  install_kinesis
  install_moto
  install_agg
}

# ---------------------------------------------------------------------------------------------
# start

# Starts a component in its own session and process group, detached from the caller. The new session
# leader writes its own pid (== its process group id) to the pid file and then execs the command.
launch() {
  local name="$1"
  shift
  local log_file pid_file i
  log_file="$(logfile "$name")"
  pid_file="$(pidfile "$name")"
  : >"$log_file"
  rm -f "$pid_file"
  (cd "$STACK_DIR" && exec setsid bash -c 'echo "$$" >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$pid_file" "$@") \
    </dev/null >>"$log_file" 2>&1 9>&- &
  for ((i = 0; i < 100; i++)); do
    [[ -s "$pid_file" ]] && return 0
    sleep 0.05
  done
  log "error: $name did not start (no $pid_file); see $log_file"
  return 1
}

# Fails unless every port of the components named is free.
check_ports_free() {
  local name port busy=0
  for name in "$@"; do
    for port in $(ports_of "$name"); do
      if port_open "$port"; then
        log "error: port $port (for $name) is in use by a process this script did not start"
        ss -ltnp "sport = :$port" >&2 2>/dev/null || true
        busy=1
      fi
    done
  done
  [[ "$busy" == 0 ]] || die "stop that process or choose other ports (LOCAL_STACK_PORT, LOCAL_STACK_KINESIS_PORT, LOCAL_STACK_KINESIS_TLS_PORT, LOCAL_STACK_DYNAMODB_PORT)"
}

start_component() {
  local name="$1" pid
  case "$name" in
    kinesis)
      launch kinesis env \
        KINESIS_MOCK_PLAIN_PORT="$KINESIS_PORT" \
        KINESIS_MOCK_TLS_PORT="$KINESIS_TLS_PORT" \
        KINESIS_MOCK_CERT_PATH="$KINESIS_PKG/server.json" \
        LOG_LEVEL="$([[ "$VERBOSE" == 1 ]] && echo INFO || echo WARN)" \
        CREATE_STREAM_DURATION=0ms \
        DELETE_STREAM_DURATION=0ms \
        SHARD_LIMIT="$SHARD_LIMIT" \
        AWS_ACCOUNT_ID="$ACCOUNT_ID" \
        node "$KINESIS_JS"
      ;;
    dynamodb)
      # `python -m moto.server -H 127.0.0.1 -p PORT`, with werkzeug's per-request log lines silenced
      # unless LOCAL_STACK_VERBOSE=1 (they cost time and grow the log by ~100 bytes per request),
      # and with one request handled at a time. moto's server is threaded and its DynamoDB reads
      # the item, checks the condition and writes it without a lock, so two conditional writes
      # to one item at the same moment could both land (two instances each winning one lease:
      # the lease store suite's `racing-takes` check caught it). DynamoDB's conditional write is
      # atomic; a lock around each request makes moto's so too.
      launch dynamodb "$VENV/bin/python" -c '
import logging, sys, threading
if sys.argv[1] != "1":
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
print("moto.server %s on 127.0.0.1:%s" % (__import__("moto").__version__, sys.argv[2]), flush=True)
from moto.moto_server import werkzeug_app
one_at_a_time = threading.Lock()
dispatch = werkzeug_app.DomainDispatcherApplication.__call__
def serialised(self, environ, start_response):
    with one_at_a_time:
        # The whole answer is made under the lock: a lazy body would run the backend after it.
        return list(dispatch(self, environ, start_response))
werkzeug_app.DomainDispatcherApplication.__call__ = serialised
from moto.server import main
main(["-H", "127.0.0.1", "-p", sys.argv[2]])
' "$VERBOSE" "$DYNAMODB_PORT"
      ;;
    router)
      launch router env \
        STACK_ROUTER_HOST=127.0.0.1 \
        STACK_ROUTER_PORT="$ROUTER_PORT" \
        STACK_KINESIS_PORT="$KINESIS_PORT" \
        STACK_DYNAMODB_PORT="$DYNAMODB_PORT" \
        STACK_ROUTER_LOG_REQUESTS="$VERBOSE" \
        node "$ROUTER_JS"
      ;;
  esac
  [[ -s "$(pidfile "$name")" ]] || return 1
  pid="$(tr -dc '0-9' <"$(pidfile "$name")")"
  log "started $name (pid $pid, ports $(ports_of "$name"))"
}

print_log_tails() {
  local name
  for name in "${COMPONENTS[@]}"; do
    if [[ -s "$(logfile "$name")" ]]; then
      printf -- '----- %s (last 20 lines) -----\n' "$(logfile "$name")" >&2
      tail -n 20 "$(logfile "$name")" >&2
    fi
  done
}

# Every TCP listener of our processes must be on loopback.
check_loopback_only() {
  command -v ss >/dev/null 2>&1 || return 0
  local name pid bad=""
  for name in "${COMPONENTS[@]}"; do
    pid="$(running_pid "$name")" || continue
    bad+="$(ss -Hltnp 2>/dev/null | grep -F "pid=$pid," | awk '$4 !~ /^127\./ && $4 !~ /^\[::1\]/' || true)"
  done
  if [[ -n "$bad" ]]; then
    printf '%s\n' "$bad" >&2
    return 1
  fi
}

health_json() { curl -s -m 3 "$ENDPOINT/health" 2>/dev/null || true; }

cmd_start() {
  need node curl setsid
  mkdir -p "$STACK_DIR"
  exec 9>"$STACK_DIR/.lock"
  if command -v flock >/dev/null 2>&1; then
    flock -w 300 9 || die "another local-stack.sh holds $STACK_DIR/.lock"
  fi
  local t0="${EPOCHREALTIME:-$SECONDS}" name all_ours=1
  for name in "${COMPONENTS[@]}"; do
    running_pid "$name" >/dev/null || all_ours=0
  done
  if [[ "$(http_code "$ENDPOINT/health")" == 200 ]]; then
    if [[ "$all_ours" == 1 ]]; then
      log "already running and healthy at $ENDPOINT"
    else
      log "an endpoint not started by this script (LocalStack?) already answers healthy at $ENDPOINT; nothing started"
    fi
    health_json
    echo
    return 0
  fi

  cmd_install

  local to_start=() started=()
  for name in "${COMPONENTS[@]}"; do
    if running_pid "$name" >/dev/null; then
      log "$name already running (pid $(running_pid "$name"))"
    else
      rm -f "$(pidfile "$name")"
      to_start+=("$name")
    fi
  done
  check_ports_free ${to_start[@]+"${to_start[@]}"}
  for name in ${to_start[@]+"${to_start[@]}"}; do
    started+=("$name")
    if ! start_component "$name"; then
      print_log_tails
      stop_components ${started[@]+"${started[@]}"}
      exit 1
    fi
  done

  local deadline=$((SECONDS + START_TIMEOUT)) pending
  while :; do
    pending=()
    for name in "${COMPONENTS[@]}"; do
      if ! running_pid "$name" >/dev/null; then
        log "error: $name exited during start-up"
        print_log_tails
        stop_components ${started[@]+"${started[@]}"}
        exit 1
      fi
      component_ready "$name" || pending+=("$name")
    done
    [[ ${#pending[@]} -eq 0 ]] && break
    if ((SECONDS >= deadline)); then
      log "error: not healthy after ${START_TIMEOUT}s; still waiting for: ${pending[*]}"
      print_log_tails
      stop_components ${started[@]+"${started[@]}"}
      exit 1
    fi
    sleep 0.2
  done

  if [[ "$(http_code "$ENDPOINT/health")" != 200 ]]; then
    log "error: $ENDPOINT/health does not answer 200: $(health_json)"
    print_log_tails
    stop_components ${started[@]+"${started[@]}"}
    exit 1
  fi
  if ! check_loopback_only; then
    log "error: a listener of the stack is not on loopback (see above); stopping"
    stop_components ${started[@]+"${started[@]}"}
    exit 1
  fi
  log "ready at $ENDPOINT in $(awk -v a="$t0" -v b="${EPOCHREALTIME:-$SECONDS}" 'BEGIN { printf "%.1f", b - a }')s (kinesis-mock 127.0.0.1:$KINESIS_PORT, moto 127.0.0.1:$DYNAMODB_PORT; logs in $STACK_DIR)"
  health_json
  echo
}

# ---------------------------------------------------------------------------------------------
# stop

# Does process group $1 still have a live (non-zombie) member? Zombies are skipped: on some machines
# the init process reaps orphans only every few seconds.
group_alive() {
  ps -eo pgid=,stat= 2>/dev/null | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'
}

stop_one() {
  local name="$1" f pid i
  f="$(pidfile "$name")"
  [[ -f "$f" ]] || return 0
  if ! pid="$(running_pid "$name")"; then
    log "$name was not running (removing stale $f)"
    rm -f "$f"
    return 0
  fi
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    group_alive "$pid" || break
    sleep 0.1
  done
  if group_alive "$pid"; then
    log "$name (process group $pid) ignored SIGTERM for 10s; sending SIGKILL"
    kill -KILL -- "-$pid" 2>/dev/null || true
    sleep 0.2
  fi
  rm -f "$f"
  log "stopped $name (process group $pid)"
}

stop_components() {
  local i
  for ((i = $# ; i >= 1; i--)); do
    stop_one "${!i}"
  done
}

cmd_stop() {
  [[ -d "$STACK_DIR" ]] || {
    log "nothing to stop"
    return 0
  }
  local any=0 name
  for name in "${COMPONENTS[@]}"; do
    [[ -f "$(pidfile "$name")" ]] && any=1
  done
  if [[ "$any" == 0 ]]; then
    log "nothing to stop"
    return 0
  fi
  stop_components "${COMPONENTS[@]}"
}

# ---------------------------------------------------------------------------------------------
# status, env, logs

cmd_status() {
  local name pid ok=1
  for name in "${COMPONENTS[@]}"; do
    if pid="$(running_pid "$name")"; then
      if component_ready "$name"; then
        printf '%-9s running  pid %-8s ports %s\n' "$name" "$pid" "$(ports_of "$name")"
      else
        printf '%-9s STARTED, NOT ANSWERING  pid %-8s ports %s\n' "$name" "$pid" "$(ports_of "$name")"
        ok=0
      fi
    else
      printf '%-9s stopped\n' "$name"
      ok=0
    fi
  done
  local code
  code="$(http_code "$ENDPOINT/health")"
  printf 'endpoint  %s  health HTTP %s  %s\n' "$ENDPOINT" "${code:-000}" "$(health_json)"
  [[ "$code" == 200 ]] || ok=0
  [[ "$ok" == 1 ]]
}

cmd_env() {
  echo "export KINESIS_TEST_ENDPOINT=$ENDPOINT AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1"
}

cmd_logs() {
  local files=() name
  for name in "${COMPONENTS[@]}"; do
    [[ -f "$(logfile "$name")" ]] && files+=("$(logfile "$name")")
  done
  [[ ${#files[@]} -gt 0 ]] || die "no logs in $STACK_DIR"
  tail -n 50 "${files[@]}"
}

usage() {
  sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  restart)
    cmd_stop
    cmd_start
    ;;
  status) cmd_status ;;
  env) cmd_env ;;
  install) cmd_install ;;
  logs) cmd_logs ;;
  -h | --help | help) usage ;;
  *)
    usage >&2
    exit 2
    ;;
esac
