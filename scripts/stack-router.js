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
// Started and stopped by scripts/local-stack.sh; it can also run alone: `node scripts/stack-router.js`.
'use strict';

const http = require('http');
const net = require('net');

const LISTEN_HOST = process.env.STACK_ROUTER_HOST || '127.0.0.1';
const LISTEN_PORT = intEnv('STACK_ROUTER_PORT', 4566);
const BACKEND_HOST = process.env.STACK_BACKEND_HOST || '127.0.0.1';
const LOG_REQUESTS = process.env.STACK_ROUTER_LOG_REQUESTS === '1';

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

function forward(req, res, backend) {
  const headers = endToEndHeaders(req.rawHeaders);
  // Keep a copy of the body while it streams through, so that a request that failed on a stale
  // pooled connection (before any response byte) can be replayed once on a fresh connection.
  const chunks = [];
  let bodyDone = false;
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    bodyDone = true;
  });

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
  req.pipe(first);
}

const server = http.createServer((req, res) => {
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
