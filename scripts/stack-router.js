#!/usr/bin/env node
// stack-router: one LocalStack-like endpoint for the local test stack.
//
// Listens on 127.0.0.1:4566 (STACK_ROUTER_HOST / STACK_ROUTER_PORT) and forwards every HTTP request,
// unchanged, to one of two emulators chosen by its X-Amz-Target header:
//   Kinesis_20131202.*   -> kinesis-mock  (127.0.0.1:STACK_KINESIS_PORT, default 4567)
//   DynamoDB_20120810.*  -> moto          (127.0.0.1:STACK_DYNAMODB_PORT, default 4568)
// Anything else gets HTTP 400 with an AWS-style JSON error. GET /health and GET /_localstack/health
// answer a LocalStack-style JSON ({"services":{"kinesis":"running","dynamodb":"running"},...}) after
// probing both backends: HTTP 200 when both accept connections, 503 otherwise.
//
// The router is protocol-agnostic: bodies are streamed through untouched (JSON 1.0/1.1 or CBOR alike),
// header names and values are kept as received (only hop-by-hop headers are dropped), and upstream
// connections are pooled with keep-alive agents. Only Node's builtin modules are used.
//
// Fault injector: tests add rules at run time through /_faults on this same port (loopback clients
// only; these paths never reach a backend), since neither emulator ever throttles or fails:
//   POST /_faults            add a rule (JSON), answers 201 {"id":"f1"}; 400 names a bad field
//   GET /_faults             every rule with its hits: {"faults":[...]}; GET /_faults/<id> one rule
//   DELETE /_faults/<id>     remove one rule (404 if unknown); DELETE /_faults removes them all
// A rule: {"service":"kinesis"|"dynamodb"|"*", "operation":"GetRecords"|["A","B"]|"*",
// "client":"pod-a" (matches the token app/pod-a in User-Agent or x-amz-user-agent), "count":N,
// "probability":0..1, "after":N, "action":{...}} with one action: {"latency_ms":ms}, {"status":5xx},
// {"throttle":true}, {"apply_then_status":5xx}, {"apply_then_reset":true}, {"reset":true},
// {"blackhole":true} (status actions take "error_type" and "message" too, and DynamoDB's
// "cancellation_reasons" for a TransactionCanceledException). The first rule that
// matches and still acts decides; a request no rule can act on is streamed as without rules, and
// with no rules the request path costs one length check. Health and /_faults are never faulted.
// docs/src/fault-injector.md describes each field and action. Each fault that acts is logged when
// STACK_ROUTER_LOG_REQUESTS=1 or STACK_ROUTER_LOG_FAULTS=1; adds and removes always are.
//
// Started and stopped by scripts/local-stack.sh; it can also run alone: `node scripts/stack-router.js`.
'use strict';

const http = require('http');
const net = require('net');

const LISTEN_HOST = process.env.STACK_ROUTER_HOST || '127.0.0.1';
const LISTEN_PORT = intEnv('STACK_ROUTER_PORT', 4566);
const BACKEND_HOST = process.env.STACK_BACKEND_HOST || '127.0.0.1';
const LOG_REQUESTS = process.env.STACK_ROUTER_LOG_REQUESTS === '1';
const LOG_FAULTS = LOG_REQUESTS || process.env.STACK_ROUTER_LOG_FAULTS === '1';

function intEnv(name, dflt) {
  const v = process.env[name];
  if (v === undefined || v === '') return dflt;
  const n = Number.parseInt(v, 10);
  if (!Number.isInteger(n) || n <= 0 || n > 65535) {
    console.error(`stack-router: ${name}=${v} is not a valid port`);
    process.exit(2);
  }
  return n;
}

function makeAgent() {
  return new http.Agent({
    keepAlive: true,
    keepAliveMsecs: 1000,
    maxSockets: 256,
    maxFreeSockets: 64,
    // Idle pooled sockets are dropped after 4 s, well before either backend would close them,
    // so a request is not sent on a connection the server is just closing.
    timeout: 4000,
    scheduling: 'lifo',
  });
}

const BACKENDS = {
  kinesis: {
    name: 'kinesis',
    host: BACKEND_HOST,
    port: intEnv('STACK_KINESIS_PORT', 4567),
    agent: makeAgent(),
  },
  dynamodb: {
    name: 'dynamodb',
    host: BACKEND_HOST,
    port: intEnv('STACK_DYNAMODB_PORT', 4568),
    agent: makeAgent(),
  },
};

const TARGET_PREFIXES = [
  ['Kinesis_20131202.', BACKENDS.kinesis],
  ['DynamoDB_20120810.', BACKENDS.dynamodb],
];

// Hop-by-hop headers (RFC 9110 7.6.1) are per connection and must not be forwarded.
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

// Copies rawHeaders ([name, value, name, value, ...], case and order preserved) minus hop-by-hop ones.
function endToEndHeaders(rawHeaders) {
  const extra = new Set();
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (rawHeaders[i].toLowerCase() === 'connection') {
      for (const token of rawHeaders[i + 1].split(',')) extra.add(token.trim().toLowerCase());
    }
  }
  const out = [];
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const lower = rawHeaders[i].toLowerCase();
    if (HOP_BY_HOP.has(lower) || extra.has(lower)) continue;
    out.push(rawHeaders[i], rawHeaders[i + 1]);
  }
  return out;
}

function log(msg) {
  console.error(`${new Date().toISOString()} stack-router: ${msg}`);
}

function sendJson(res, status, body, contentType) {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const payload = Buffer.from(JSON.stringify(body));
  res.writeHead(status, {
    'Content-Type': contentType || 'application/json',
    'Content-Length': payload.length,
  });
  res.end(payload);
}

// AWS JSON protocol error shape, so SDKs surface the message instead of a parse error.
function sendAwsError(res, status, type, message) {
  sendJson(res, status, { __type: type, message }, 'application/x-amz-json-1.1');
}

function probe(backend, timeoutMs) {
  return new Promise((resolve) => {
    const socket = net.connect({ host: backend.host, port: backend.port });
    const done = (ok) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

async function health(req, res) {
  const [kinesis, dynamodb] = await Promise.all([
    probe(BACKENDS.kinesis, 1000),
    probe(BACKENDS.dynamodb, 1000),
  ]);
  const ok = kinesis && dynamodb;
  const body = {
    services: {
      kinesis: kinesis ? 'running' : 'error',
      dynamodb: dynamodb ? 'running' : 'error',
    },
    edition: 'local-stack-router',
    version: '1',
    backends: {
      kinesis: `kinesis-mock http://${BACKENDS.kinesis.host}:${BACKENDS.kinesis.port}`,
      dynamodb: `moto http://${BACKENDS.dynamodb.host}:${BACKENDS.dynamodb.port}`,
    },
  };
  if (req.method === 'HEAD') {
    res.writeHead(ok ? 200 : 503, { 'Content-Type': 'application/json' });
    res.end();
    return;
  }
  sendJson(res, ok ? 200 : 503, body);
}

function isHealthPath(url) {
  const path = url.split('?')[0].replace(/\/+$/, '');
  return path === '/health' || path === '/_localstack/health';
}

// Is this error one of a pooled keep-alive socket that the server closed under us?
function isStaleSocketError(err) {
  return err && (err.code === 'ECONNRESET' || err.code === 'EPIPE' || err.code === 'ECONNABORTED');
}

// Forwards req to backend and relays the answer. Two options serve the fault injector only:
//   body:     the whole request body, read already (a fault held the request), sent instead of piping req;
//   onAnswer: called once the backend's whole answer has arrived, which is then not relayed (the
//             request was applied; the fault decides what the client gets instead).
function forward(req, res, backend, { body, onAnswer } = {}) {
  const headers = endToEndHeaders(req.rawHeaders);
  // Keep a copy of the body while it streams through, so that a request that failed on a stale
  // pooled connection (before any response byte) can be replayed once on a fresh connection.
  const chunks = [];
  let bodyDone = false;
  if (body !== undefined) {
    chunks.push(body);
    bodyDone = true;
  } else {
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      bodyDone = true;
    });
  }

  let finished = false;
  let upstream = null;
  res.on('close', () => {
    finished = true;
    if (upstream && !res.writableFinished) upstream.destroy();
  });

  const send = (attempt) => {
    const opts = {
      host: backend.host,
      port: backend.port,
      method: req.method,
      path: req.url,
      headers,
      agent: attempt === 0 ? backend.agent : false,
      setHost: false, // the client's Host header is in `headers` already and is kept as sent
    };
    const up = http.request(opts);
    upstream = up;
    let responded = false;

    up.on('response', (upRes) => {
      responded = true;
      if (finished) {
        upRes.resume();
        return;
      }
      if (onAnswer) {
        upRes.resume();
        upRes.on('end', () => {
          if (!finished) onAnswer();
        });
        upRes.on('error', () => res.destroy());
        upRes.on('aborted', () => res.destroy());
        return;
      }
      res.writeHead(upRes.statusCode, upRes.statusMessage, endToEndHeaders(upRes.rawHeaders));
      upRes.pipe(res);
      upRes.on('error', () => res.destroy());
      upRes.on('aborted', () => res.destroy());
    });

    up.on('error', (err) => {
      if (finished || responded) {
        res.destroy();
        return;
      }
      if (attempt === 0 && up.reusedSocket && isStaleSocketError(err)) {
        const replay = () => {
          if (finished) return;
          const retry = send(1);
          retry.end(Buffer.concat(chunks));
        };
        if (bodyDone) {
          replay();
        } else {
          req.once('end', replay);
          req.resume(); // the failed pipe paused the request; keep reading the rest of the body
        }
        return;
      }
      log(`${backend.name} backend ${backend.host}:${backend.port} failed: ${err.code || err.message}`);
      sendAwsError(
        res,
        502,
        'ServiceUnavailableException',
        `stack-router: ${backend.name} backend at ${backend.host}:${backend.port} failed: ` +
          `${err.code || err.message} (is the local stack running? scripts/local-stack.sh status)`,
      );
    });
    return up;
  };

  const first = send(0);
  if (body !== undefined) {
    first.end(body);
  } else {
    req.pipe(first);
  }
}

// ---------------------------------------------------------------------------------------------
// Fault injector. Neither emulator ever throttles or fails on its own, so tests switch faults on
// and off here, at run time, through /_faults (see the header and docs/src/fault-injector.md).

// The rules, in the order they were added: the first one that acts on a request decides. Empty in
// normal use, and then the request path only checks this array's length.
const faults = [];
let nextFaultId = 1;

const RULE_FIELDS = ['service', 'operation', 'client', 'action', 'count', 'probability', 'after'];
const SERVICES = ['*', 'kinesis', 'dynamodb'];
const CONTROL_BODY_LIMIT = 64 * 1024;
// The characters aws_types::app_name::AppName accepts, so that a rule's client can match at all.
const APP_NAME = /^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$/;
const OPERATION = /^(\*|[A-Za-z0-9]+)$/;

const isTrue = (v) => v === true;
const isErrorStatus = (v) => Number.isInteger(v) && v >= 400 && v <= 599;
const isNonEmptyString = (v) => typeof v === 'string' && v !== '';
const isCancellationReasons = (v) =>
  Array.isArray(v) &&
  v.length > 0 &&
  v.every(
    (r) =>
      r !== null &&
      typeof r === 'object' &&
      !Array.isArray(r) &&
      isNonEmptyString(r.Code) &&
      (r.Message === undefined || isNonEmptyString(r.Message)) &&
      Object.keys(r).every((k) => k === 'Code' || k === 'Message'),
  );

// Each action: the check of its value, what that check wants (for the 400 answer), and the keys it
// takes beside it in "action".
const ACTIONS = {
  latency_ms: {
    valid: (v) => Number.isFinite(v) && v >= 0 && v <= 3600000,
    wants: 'a number of milliseconds from 0 to 3600000',
    extras: [],
  },
  status: {
    valid: isErrorStatus,
    wants: 'an HTTP status from 400 to 599',
    extras: ['error_type', 'message', 'cancellation_reasons'],
  },
  throttle: { valid: isTrue, wants: 'true', extras: ['message'] },
  apply_then_status: {
    valid: isErrorStatus,
    wants: 'an HTTP status from 400 to 599',
    extras: ['error_type', 'message', 'cancellation_reasons'],
  },
  apply_then_reset: { valid: isTrue, wants: 'true', extras: [] },
  reset: { valid: isTrue, wants: 'true', extras: [] },
  blackhole: { valid: isTrue, wants: 'true', extras: [] },
};

// The throttling error of each service, one that the AWS SDK for Rust classifies as throttling
// (and so retries with backoff), with the message the real service gives.
const THROTTLES = {
  kinesis: ['ProvisionedThroughputExceededException', 'Rate exceeded for shard'],
  dynamodb: ['ThrottlingException', 'Rate of requests exceeds the allowed throughput.'],
};

// A rule that does not validate; `field` names the offending field for the 400 answer.
class RuleError extends Error {
  constructor(field, message) {
    super(message);
    this.field = field;
  }
}

// Checks a rule as POSTed and returns it ready to match (without its id).
function parseRule(input) {
  if (input === null || typeof input !== 'object' || Array.isArray(input)) {
    throw new RuleError(null, 'a rule must be a JSON object');
  }
  for (const key of Object.keys(input)) {
    // Rejecting unknown fields catches typos ("probabilty") that would otherwise widen a rule.
    if (!RULE_FIELDS.includes(key)) {
      throw new RuleError(key, `unknown field "${key}" (a rule has ${RULE_FIELDS.join(', ')})`);
    }
  }

  const service = input.service === undefined ? '*' : input.service;
  if (!SERVICES.includes(service)) throw new RuleError('service', '"service" must be "kinesis", "dynamodb" or "*"');

  const operation = input.operation === undefined ? '*' : input.operation;
  const names = typeof operation === 'string' ? [operation] : operation;
  if (!Array.isArray(names) || names.length === 0 || !names.every((n) => typeof n === 'string' && OPERATION.test(n))) {
    throw new RuleError(
      'operation',
      '"operation" must be "*", an operation name such as "GetRecords" (the X-Amz-Target part after the dot) ' +
        'or a non-empty list of them',
    );
  }

  const client = input.client === undefined ? null : input.client;
  if (client !== null && (typeof client !== 'string' || !APP_NAME.test(client))) {
    throw new RuleError('client', "\"client\" must be an SDK app name (letters, digits and !#$%&'*+-.^_`|~)");
  }

  const count = input.count === undefined ? null : input.count;
  if (count !== null && !(Number.isInteger(count) && count >= 1)) {
    throw new RuleError('count', '"count" must be an integer of at least 1');
  }
  const probability = input.probability === undefined ? 1 : input.probability;
  if (!(typeof probability === 'number' && probability >= 0 && probability <= 1)) {
    throw new RuleError('probability', '"probability" must be a number from 0 to 1');
  }
  const after = input.after === undefined ? 0 : input.after;
  if (!(Number.isInteger(after) && after >= 0)) {
    throw new RuleError('after', '"after" must be an integer of at least 0');
  }

  const action = input.action;
  const kindList = Object.keys(ACTIONS).join(', ');
  if (action === null || typeof action !== 'object' || Array.isArray(action)) {
    throw new RuleError('action', `"action" must be an object with one of ${kindList}, such as {"status": 500}`);
  }
  const kinds = Object.keys(action).filter((k) => Object.hasOwn(ACTIONS, k));
  if (kinds.length !== 1) {
    const sets = kinds.length !== 0 ? kinds.join(', ') : `none (it has ${Object.keys(action).join(', ') || 'no key'})`;
    throw new RuleError('action', `"action" must set exactly one of ${kindList}; it sets ${sets}`);
  }
  const kind = kinds[0];
  const spec = ACTIONS[kind];
  if (!spec.valid(action[kind])) throw new RuleError(`action.${kind}`, `"action.${kind}" must be ${spec.wants}`);
  for (const key of Object.keys(action)) {
    if (key === kind) continue;
    if (!spec.extras.includes(key)) {
      const takes = spec.extras.length === 0 ? 'nothing else' : spec.extras.join(', ');
      throw new RuleError(`action.${key}`, `"action.${key}" does not go with ${kind} (it takes ${takes})`);
    }
    if (key === 'cancellation_reasons') {
      if (!isCancellationReasons(action[key])) {
        throw new RuleError(
          `action.${key}`,
          `"action.${key}" must be a non-empty list of {"Code": "...", "Message": "..."} (Message optional), ` +
            'one for each action of the transaction',
        );
      }
      continue;
    }
    if (typeof action[key] !== 'string' || action[key] === '') {
      throw new RuleError(`action.${key}`, `"action.${key}" must be a non-empty string`);
    }
  }

  return {
    service,
    operation,
    operations: names.includes('*') ? null : new Set(names), // null: every operation
    client,
    action,
    kind,
    value: action[kind],
    errorType: action.error_type || (action[kind] === 503 ? 'ServiceUnavailable' : 'InternalFailure'),
    message: action.message || null,
    // DynamoDB's TransactionCanceledException says why each action of the transaction was
    // cancelled, in order: {"Code":"None"} for one that was not at fault.
    cancellationReasons: action.cancellation_reasons || null,
    count,
    probability,
    after,
    seen: 0, // matching requests let through while `after` was not reached
    hits: 0, // requests acted on
    held: kind === 'blackhole' ? new Set() : null, // requests a blackhole holds now
  };
}

// The rule as GET /_faults lists it.
function describeFault(f) {
  const out = { id: f.id, service: f.service, operation: f.operation };
  if (f.client !== null) out.client = f.client;
  out.action = f.action;
  if (f.count !== null) out.count = f.count;
  out.probability = f.probability;
  out.after = f.after;
  out.hits = f.hits;
  if (f.held !== null) out.held = f.held.size;
  return out;
}

function actionLabel(f) {
  return f.value === true ? f.kind : `${f.kind}=${f.value}`;
}

// The app names (`app/<name>` tokens) in the request's user agents: the AWS SDK for Rust puts the
// app name of its config (aws_config's app_name) into x-amz-user-agent and User-Agent.
function appNames(req) {
  const names = [];
  for (const header of [req.headers['x-amz-user-agent'], req.headers['user-agent']]) {
    if (typeof header !== 'string') continue;
    for (const token of header.split(/\s+/)) {
      if (token.startsWith('app/')) names.push(token.slice(4));
    }
  }
  return names;
}

// The rule that acts on this request, or null; counts the hit. A rule that matches but is spent,
// still within `after`, or loses its probability draw leaves the request to the rules after it.
function pickFault(req, backend, target) {
  const operation = target.slice(target.indexOf('.') + 1);
  let apps = null; // parsed on first need: most rules name no client
  for (const f of faults) {
    if (f.service !== '*' && f.service !== backend.name) continue;
    if (f.operations !== null && !f.operations.has(operation)) continue;
    if (f.client !== null) {
      if (apps === null) apps = appNames(req);
      if (!apps.includes(f.client)) continue;
    }
    if (f.count !== null && f.hits >= f.count) continue; // spent: listed still, acts no more
    if (f.seen < f.after) {
      f.seen++;
      continue;
    }
    if (f.probability < 1 && !(Math.random() < f.probability)) continue;
    f.hits++;
    if (LOG_FAULTS) {
      if (apps === null) apps = appNames(req);
      log(`fault ${f.id} ${actionLabel(f)} ${backend.name}.${operation} client=${apps[0] || '-'}`);
    }
    return f;
  }
  return null;
}

// Buffers the whole request body, for a request that a fault delays or holds before it is forwarded.
// Never settles when the client goes away mid-body; the request is dropped then anyway.
function readBody(req) {
  return new Promise((resolve) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks)));
  });
}

// An error in the AWS JSON protocol of the service the backend stands in for: Kinesis speaks
// awsJson1_1 (a bare __type), DynamoDB awsJson1_0 (a __type with its namespace).
function sendFaultError(res, backend, status, type, message, reasons) {
  if (backend === BACKENDS.dynamodb) {
    const qualified = type.includes('#') ? type : `com.amazonaws.dynamodb.v20120810#${type}`;
    const body = { __type: qualified, message };
    if (reasons) body.CancellationReasons = reasons;
    sendJson(res, status, body, 'application/x-amz-json-1.0');
  } else {
    sendJson(res, status, { __type: type, message }, 'application/x-amz-json-1.1');
  }
}

function sendStatusFault(res, backend, f, applied) {
  const what = applied ? 'the request was applied; its answer was replaced by' : 'injected';
  // As DynamoDB words a cancelled transaction: the reasons' codes, in order.
  const reasons = f.cancellationReasons;
  const cancelled = reasons
    ? `Transaction cancelled, please refer cancellation reasons for specific reasons [${reasons.map((r) => r.Code).join(', ')}]`
    : null;
  const message = f.message || cancelled || `stack-router fault ${f.id}: ${what} HTTP ${f.value}`;
  sendFaultError(res, backend, f.value, f.errorType, message, reasons);
}

// Drops the client's connection with a TCP RST, so that it sees a connection reset (a plain destroy
// sends FIN, which a client may take for a server that closed an idle keep-alive connection).
function resetClient(req) {
  const socket = req.socket;
  if (typeof socket.resetAndDestroy === 'function' && !socket.destroyed) {
    socket.resetAndDestroy();
  } else {
    socket.destroy();
  }
}

// Forwards a request that a blackhole rule held, once that rule is removed; unless its client gave up.
function releaseHeld(held) {
  held.body.then((body) => {
    if (!held.gone) forward(held.req, held.res, held.backend, { body });
  });
}

// Carries out fault f on a request it acted on. Only the apply_then_* actions read the backend's
// answer whole; the others leave it streaming (SubscribeToShard answers are long-lived streams).
function injectFault(req, res, backend, f) {
  switch (f.kind) {
    case 'reset':
      resetClient(req);
      return;
    case 'status':
      req.resume(); // drain the body so that the keep-alive connection stays usable
      sendStatusFault(res, backend, f, false);
      return;
    case 'throttle': {
      req.resume();
      const [type, message] = THROTTLES[backend.name];
      sendFaultError(res, backend, 400, type, f.message || `${message} (stack-router fault ${f.id})`);
      return;
    }
    case 'apply_then_status':
      forward(req, res, backend, { onAnswer: () => sendStatusFault(res, backend, f, true) });
      return;
    case 'apply_then_reset':
      forward(req, res, backend, { onAnswer: () => resetClient(req) });
      return;
    case 'latency_ms': {
      const body = readBody(req);
      let gone = false;
      const timer = setTimeout(() => {
        body.then((b) => {
          if (!gone) forward(req, res, backend, { body: b });
        });
      }, f.value);
      // Nothing has been answered yet, so a close here means the client gave up.
      res.once('close', () => {
        gone = true;
        clearTimeout(timer);
      });
      return;
    }
    case 'blackhole': {
      const held = { req, res, backend, body: readBody(req), gone: false };
      f.held.add(held);
      res.once('close', () => {
        held.gone = true;
        f.held.delete(held);
      });
      return;
    }
  }
}

// Removes rule f and forwards the requests it held, as if it had never acted. Returns how many.
function removeFault(f) {
  faults.splice(faults.indexOf(f), 1);
  let released = 0;
  if (f.held !== null) {
    for (const held of f.held) {
      releaseHeld(held);
      released++;
    }
    f.held.clear();
  }
  log(`fault ${f.id} removed (hits ${f.hits}${f.held !== null ? `, ${released} held request(s) released` : ''})`);
  return released;
}

// The control path a URL names: '' for /_faults itself, the id for /_faults/<id>, null for neither.
function faultsPath(url) {
  const path = url.split('?')[0].replace(/\/+$/, '');
  if (path === '/_faults') return '';
  if (!path.startsWith('/_faults/')) return null;
  const id = path.slice('/_faults/'.length);
  try {
    return decodeURIComponent(id);
  } catch {
    return id;
  }
}

function isLoopback(address) {
  if (typeof address !== 'string') return false;
  return address.startsWith('127.') || address === '::1' || address.startsWith('::ffff:127.');
}

function readControlBody(req, res, done) {
  const chunks = [];
  let size = 0;
  req.on('data', (c) => {
    size += c.length;
    if (size <= CONTROL_BODY_LIMIT) chunks.push(c);
  });
  req.on('end', () => {
    if (size > CONTROL_BODY_LIMIT) {
      sendJson(res, 413, { error: `stack-router: a rule is at most ${CONTROL_BODY_LIMIT} bytes` });
    } else {
      done(Buffer.concat(chunks).toString('utf8'));
    }
  });
}

function addFault(res, text) {
  let rule;
  try {
    rule = parseRule(JSON.parse(text));
  } catch (err) {
    if (err instanceof SyntaxError) {
      sendJson(res, 400, { error: `stack-router: the rule is not JSON: ${err.message}` });
      return;
    }
    if (!(err instanceof RuleError)) throw err;
    const body = { error: `stack-router: ${err.message}` };
    if (err.field !== null) body.field = err.field;
    sendJson(res, 400, body);
    return;
  }
  rule.id = `f${nextFaultId++}`;
  faults.push(rule);
  log(`fault ${rule.id} added: ${JSON.stringify(describeFault(rule))}`);
  sendJson(res, 201, { id: rule.id });
}

function methodNotAllowed(req, res, allow) {
  res.setHeader('Allow', allow);
  sendJson(res, 405, { error: `stack-router: ${req.method} ${req.url} is not allowed; use ${allow}` });
}

// The control API. Loopback clients only, even when the router is made to listen further out:
// a fault rule can stop every test on the machine.
function handleFaults(req, res, id) {
  if (!isLoopback(req.socket.remoteAddress)) {
    req.resume();
    sendJson(res, 403, { error: 'stack-router: /_faults answers loopback clients only' });
    return;
  }
  if (id === '' && req.method === 'POST') {
    readControlBody(req, res, (text) => addFault(res, text));
    return;
  }
  req.resume(); // no other control request has a body worth reading
  if (id === '') {
    if (req.method === 'GET') {
      sendJson(res, 200, { faults: faults.map(describeFault) });
    } else if (req.method === 'DELETE') {
      const removed = faults.slice();
      let released = 0;
      for (const f of removed) released += removeFault(f);
      sendJson(res, 200, { removed: removed.map((f) => f.id), released });
    } else {
      methodNotAllowed(req, res, 'GET, POST, DELETE');
    }
    return;
  }
  if (req.method !== 'GET' && req.method !== 'DELETE') {
    methodNotAllowed(req, res, 'GET, DELETE');
    return;
  }
  const f = faults.find((r) => r.id === id);
  if (f === undefined) {
    sendJson(res, 404, { error: `stack-router: no fault rule "${id}"` });
  } else if (req.method === 'GET') {
    sendJson(res, 200, describeFault(f));
  } else {
    sendJson(res, 200, { id, released: removeFault(f) });
  }
}

const server = http.createServer((req, res) => {
  // The control API first: its paths never reach a backend, whatever their headers say. Any other
  // request pays one startsWith for it.
  if (req.url.startsWith('/_faults')) {
    const id = faultsPath(req.url);
    if (id !== null) {
      if (LOG_REQUESTS) log(`${req.method} ${req.url} -> faults`);
      handleFaults(req, res, id);
      return;
    }
  }
  const target = req.headers['x-amz-target'];
  let backend = null;
  if (typeof target === 'string') {
    for (const [prefix, b] of TARGET_PREFIXES) {
      if (target.startsWith(prefix)) {
        backend = b;
        break;
      }
    }
  }
  if (LOG_REQUESTS) log(`${req.method} ${req.url} target=${target || '-'} -> ${backend ? backend.name : '-'}`);

  if (backend) {
    // Faults act on backend requests only, and never on a health path (even one with a target).
    if (faults.length !== 0 && !isHealthPath(req.url)) {
      const f = pickFault(req, backend, target);
      if (f !== null) {
        injectFault(req, res, backend, f);
        return;
      }
    }
    forward(req, res, backend);
    return;
  }
  req.resume(); // drain any body
  if ((req.method === 'GET' || req.method === 'HEAD') && isHealthPath(req.url)) {
    health(req, res).catch((err) => sendJson(res, 500, { error: String(err) }));
    return;
  }
  const why = target === undefined ? 'has no X-Amz-Target header' : `has X-Amz-Target "${target}"`;
  sendAwsError(
    res,
    400,
    'UnknownOperationException',
    `stack-router: ${req.method} ${req.url} ${why}; this endpoint serves only Kinesis ` +
      '(X-Amz-Target: Kinesis_20131202.*) and DynamoDB (X-Amz-Target: DynamoDB_20120810.*) ' +
      'JSON/CBOR requests, plus GET /health and GET /_localstack/health',
  );
});

// Clients (hyper in the AWS SDK for Rust keeps idle connections for 90 s) should be the ones to close
// idle keep-alive connections, not the server, so that they never send on a connection being closed.
server.keepAliveTimeout = 120000;
server.headersTimeout = 125000;
server.requestTimeout = 0; // long-lived requests (e.g. SubscribeToShard) are allowed
server.maxRequestsPerSocket = 0;

server.on('clientError', (err, socket) => {
  if (socket.writable && !socket.destroyed) {
    socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
  } else {
    socket.destroy();
  }
});

server.on('error', (err) => {
  log(`cannot listen on ${LISTEN_HOST}:${LISTEN_PORT}: ${err.code || err.message}`);
  process.exit(1);
});

server.listen(LISTEN_PORT, LISTEN_HOST, () => {
  log(
    `listening on http://${LISTEN_HOST}:${LISTEN_PORT}; kinesis -> ${BACKENDS.kinesis.host}:${BACKENDS.kinesis.port}, ` +
      `dynamodb -> ${BACKENDS.dynamodb.host}:${BACKENDS.dynamodb.port}`,
  );
});

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    log(`${sig}: exiting`);
    process.exit(0);
  });
}
