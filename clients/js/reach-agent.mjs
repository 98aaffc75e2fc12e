// A reach remote agent in JavaScript: the reference implementation of docs/wire.md (version 1)
// for Node 20 and `ws`. An agent outside the cluster dials the gateway, says a signed hello, and
// from then on is an agent like any other: it answers requests (replies, streams, typed errors),
// calls other agents by ID or capability, and reconnects after a broken connection (a reconnect
// within the gateway's grace period is its restart).
//
// As a library:
//
//   import { RemoteAgent } from './reach-agent.mjs';
//   const agent = new RemoteAgent({
//     url: 'ws://127.0.0.1:8000', agentId: 'calc-js-1', token, secret,   // secret: hex or Buffer
//     capabilities: ['math.add'], description: 'Adds two numbers.',
//     handlers: { 'test.add@1.0': { returns: 'test.sum@1.0', handle: async (p, ctx) => ({ total: p.a + p.b }) } },
//   });
//   await agent.start();            // resolves on the first welcome
//   await agent.stop('done');       // goodbye
//
// As a program (the calculator the integration tests run):
//
//   node reach-agent.mjs --gateway ws://127.0.0.1:8000 --id calc-js-1 --token TOKEN --secret HEX
//
// It prints one JSON line per event on stdout: {"welcome": {...}}, {"handled": "<schema>"},
// {"closed": <code>, "reason": "..."}.

import { createHmac, randomBytes } from 'node:crypto';
import { pathToFileURL } from 'node:url';

import WebSocket from 'ws';

export const WIRE_VERSION = 1;
export const CONNECT_PATH = '/v1/agents/connect';
export const STREAM_END_SCHEMA = 'reach.stream.end@1.0';
export const ACK_SCHEMA = 'reach.ack@1.0';
export const ERROR_SCHEMA = 'reach.error@1.0';
export const CANCEL_SCHEMA = 'reach.cancel@1.0';
// Close codes after which reconnecting would only repeat the refusal.
export const FINAL_CODES = new Set([1000, 4400, 4401, 4403, 4410, 4413, 4426]);

/** An agent's secret: HMAC-SHA256(master key, "reach/principal/" + agentId). */
export function agentSecret(master, agentId) {
  const key = typeof master === 'string' ? Buffer.from(master, 'hex') : master;
  return createHmac('sha256', key).update(Buffer.from(`reach/principal/${agentId}`, 'utf8')).digest();
}

/** The hello's signature: hex HMAC-SHA256 over the five lines of docs/wire.md. */
export function helloMac(secret, agentId, ts, nonce, declaration) {
  const message = ['reach-hello/1', agentId, String(ts), nonce, declaration].join('\n');
  return createHmac('sha256', secret).update(Buffer.from(message, 'utf8')).digest('hex');
}

/** A signed hello frame (an object; send it as JSON text). */
export function makeHello(agentId, declaration, secret, { nowMs = Date.now(), nonce } = {}) {
  const text = JSON.stringify(declaration);
  const once = nonce ?? randomBytes(16).toString('hex');
  return {
    type: 'hello', v: WIRE_VERSION, agent_id: agentId, ts: nowMs, nonce: once,
    declaration: text, sig: helloMac(secret, agentId, nowMs, once, text),
  };
}

/** The channel's URL from a gateway's: http(s) becomes ws(s), the path is added if missing. */
export function connectUrl(gateway) {
  let url = gateway.replace(/\/+$/, '').replace(/^http:\/\//, 'ws://').replace(/^https:\/\//, 'wss://');
  const rest = url.split('://')[1] ?? '';
  if (!rest.includes('/')) url += CONNECT_PATH;
  return url;
}

function newId() {
  return randomBytes(16).toString('hex');
}

/** An error a handler throws to answer with a typed reach error (severity: retryable,
 * degradable or fatal). Any other exception is answered as a retryable handler_error. */
export class ReachError extends Error {
  constructor(message, { code = 'reach_error', severity = 'fatal', suggestion = '', details = {} } = {}) {
    super(message);
    this.code = code;
    this.severity = severity;
    this.suggestion = suggestion;
    this.details = details;
  }
}

export class RemoteAgent {
  /**
   * @param {object} o
   * @param {string} o.url  the gateway (http(s) or ws(s))
   * @param {string} o.agentId
   * @param {string} [o.token]  the gateway's bearer token
   * @param {string|Buffer} [o.secret]  the agent's secret (hex or bytes); none with signing off
   * @param {string[]} [o.capabilities]
   * @param {string} [o.description]
   * @param {Object<string, {returns?: string, streaming?: boolean, jsonSchema?: object, handle: Function}>} o.handlers
   *   by payload schema ("name@MAJOR.MINOR"); handle(payload, ctx) returns the reply payload
   *   (or, streaming, is an async generator of chunks)
   * @param {'resend'|'cancel'} [o.pendingPolicy]
   * @param {boolean} [o.reconnect]
   */
  constructor({ url, agentId, token, secret, capabilities = [], description = '', handlers = {},
    pendingPolicy = 'resend', reconnect = true, log = () => {} }) {
    this.url = connectUrl(url);
    this.agentId = agentId;
    this.token = token;
    this.secret = typeof secret === 'string' ? Buffer.from(secret, 'hex') : (secret ?? Buffer.alloc(32));
    this.handlers = handlers;
    this.declaration = {
      capabilities, description, pending_policy: pendingPolicy,
      handlers: Object.entries(handlers).map(([schema, h]) => ({
        schema, returns: h.returns ?? null, streaming: Boolean(h.streaming), json_schema: h.jsonSchema ?? null,
      })),
    };
    this.reconnect = reconnect;
    this.log = log;
    this.ws = null;
    this.epoch = 0;
    this.outbox = [];
    this.running = new Map(); // msg_id -> {cancelled, sender}
    this.answered = new Set();
    this.waiting = new Map(); // msg_id -> {resolve, reject}
    this.stopping = false;
    this.delay = 50;
    this.handled = 0;
    this.onWelcome = null;
    this.onClose = null;
  }

  /** Connects; resolves with the first welcome, rejects if the gateway refuses for good. */
  start() {
    return new Promise((resolve, reject) => {
      this._first = { resolve, reject };
      this._dial();
    });
  }

  _dial() {
    const headers = this.token ? { Authorization: `Bearer ${this.token}` } : {};
    // No per-message deflate: envelopes are small JSON, not worth compressing frame by frame.
    const ws = new WebSocket(this.url, { headers, maxPayload: 0, perMessageDeflate: false });
    this.ws = ws;
    let welcomed = false;
    ws.on('open', () => ws.send(JSON.stringify(makeHello(this.agentId, this.declaration, this.secret))));
    ws.on('message', (data, isBinary) => {
      if (isBinary) return;
      const frame = JSON.parse(data.toString('utf8'));
      if (!welcomed) {
        if (frame.type !== 'welcome') return;
        welcomed = true;
        this.epoch = frame.epoch;
        this.delay = 50;
        this._heartbeat = setInterval(() => this._send({ type: 'heartbeat', ts: Date.now() }),
          Math.max(1, frame.heartbeat_s) * 1000);
        this.onWelcome?.(frame);
        if (this._first) { this._first.resolve(frame); this._first = null; }
        this._flush();
        return;
      }
      this._onFrame(frame);
    });
    ws.on('error', (err) => this.log({ error: String(err) }));
    ws.on('close', (code, reasonBuf) => {
      clearInterval(this._heartbeat);
      const reason = reasonBuf.toString('utf8');
      this.ws = null;
      this.onClose?.(code, reason);
      if (this.stopping || FINAL_CODES.has(code) || !this.reconnect) {
        if (this._first) { this._first.reject(new Error(`refused ${code}: ${reason}`)); this._first = null; }
        this._closed?.(code);
        return;
      }
      setTimeout(() => this._dial(), this.delay);
      this.delay = Math.min(this.delay * 2, 2000);
    });
  }

  /** Leaves for good: what is queued goes first, then goodbye; resolves once closed. */
  stop(reason = '') {
    this.stopping = true;
    const ws = this.ws;
    if (!ws) return Promise.resolve();
    return new Promise((resolve) => {
      this._closed = resolve;
      this._flush();
      ws.send(JSON.stringify({ type: 'goodbye', reason }), () => ws.close(1000, 'goodbye'));
    });
  }

  // -- sending ------------------------------------------------------------------------------

  _send(frame) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(frame));
  }

  /** Queues an envelope; what is queued in one turn of the event loop leaves as one frame. */
  sendEnvelope(env) {
    this.outbox.push(env);
    if (!this._scheduled) {
      this._scheduled = true;
      setImmediate(() => { this._scheduled = false; this._flush(); });
    }
  }

  _flush() {
    if (!this.outbox.length || !this.ws || this.ws.readyState !== WebSocket.OPEN) return;
    const items = this.outbox;
    this.outbox = [];
    this._send(items.length === 1 ? { type: 'envelope', envelope: items[0] } : { type: 'batch', envelopes: items });
  }

  // -- receiving ----------------------------------------------------------------------------

  _onFrame(frame) {
    if (frame.type === 'envelope') this._onEnvelope(frame.envelope);
    else if (frame.type === 'batch') frame.envelopes.forEach((e) => this._onEnvelope(e));
    else if (frame.type === 'error') {
      const waiter = this.waiting.get(frame.msg_id);
      if (waiter) { this.waiting.delete(frame.msg_id); waiter.reject(new ReachError(frame.message, { code: frame.code })); }
      this.log({ refused: frame });
    }
  }

  _onEnvelope(env) {
    if (env.request_id && env.msg_type !== 'request') {
      const waiter = this.waiting.get(env.request_id);
      if (waiter && env.msg_type !== 'event') { this.waiting.delete(env.request_id); waiter.resolve(env); }
      return;
    }
    if (env.payload_schema === CANCEL_SCHEMA) {
      // Obeyed only from the request's own sender (reach's host sends its cancels as that sender).
      const run = this.running.get(env.payload.request_id);
      if (run && run.sender === env.sender) run.cancelled = true;
      return;
    }
    if (this.running.has(env.msg_id) || this.answered.has(env.msg_id)) return; // re-sent: answered already
    const run = { cancelled: false, sender: env.sender };
    this.running.set(env.msg_id, run);
    this._handle(env, run, Date.now()).finally(() => {
      this.running.delete(env.msg_id);
      this.answered.add(env.msg_id);
      if (this.answered.size > 10000) this.answered.delete(this.answered.values().next().value);
    });
  }

  async _handle(env, run, arrived) {
    const deadline = env.timeout_ms ? arrived + env.timeout_ms : null;
    const isRequest = env.msg_type === 'request';
    const handler = this._handlerFor(env.payload_schema);
    if (!handler) {
      const reads = Object.keys(this.handlers).join(', ') || 'nothing';
      if (isRequest) this._fail(env, 'schema_incompatible', `${this.agentId} has no handler for ${env.payload_schema}; it reads ${reads}`, 'fatal');
      return;
    }
    const ctx = new RemoteContext(this, env, deadline);
    try {
      if (handler.streaming) {
        let chunks = 0;
        for await (const chunk of handler.handle(env.payload, ctx)) {
          if (run.cancelled) return;
          this.sendEnvelope(this._answer(env, 'event', chunk, handler.returns));
          chunks += 1;
        }
        if (isRequest) this.sendEnvelope(this._answer(env, 'response', { chunks }, STREAM_END_SCHEMA));
      } else {
        const result = await withDeadline(handler.handle(env.payload, ctx), deadline);
        if (run.cancelled || !isRequest) return;
        this.sendEnvelope(result === undefined || result === null
          ? this._answer(env, 'response', {}, ACK_SCHEMA)
          : this._answer(env, 'response', result, handler.returns));
      }
      this.handled += 1;
      this.log({ handled: env.payload_schema });
    } catch (err) {
      if (!isRequest || run.cancelled) return;
      if (err instanceof ReachError) this._fail(env, err.code, err.message, err.severity, err.suggestion, err.details);
      else if (err instanceof DeadlineError) this._fail(env, 'request_timeout', `handler of ${this.agentId} passed the deadline`, 'retryable');
      else this._fail(env, 'handler_error', `${err?.name ?? 'Error'}: ${err?.message ?? err}`, 'retryable');
    }
  }

  _handlerFor(schema) {
    if (this.handlers[schema]) return this.handlers[schema];
    // Any minor version of a major reads any other.
    const [name, version] = schema.split('@');
    const major = (version ?? '').split('.')[0];
    const key = Object.keys(this.handlers).find((k) => { const [n, v] = k.split('@'); return n === name && v.split('.')[0] === major; });
    return key ? this.handlers[key] : null;
  }

  _answer(request, msgType, payload, schema) {
    return {
      msg_id: newId(), msg_type: msgType, sender: this.agentId, receiver: request.sender,
      payload, payload_schema: schema ?? 'reach.json@1.0', request_id: request.msg_id,
      trace_id: request.trace_id, session_id: request.session_id ?? null, hops: request.hops ?? [],
      timestamp: Date.now() / 1000,
    };
  }

  _fail(request, code, reason, severity, suggestion = '', details = {}) {
    const env = this._answer(request, 'error', {}, ERROR_SCHEMA);
    env.error_info = { code, reason, severity, suggestion, details };
    this.sendEnvelope(env);
  }

  /** Sends a request and resolves with its reply envelope (rejects with a ReachError). */
  call(env) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(env.msg_id);
        reject(new ReachError(`no reply from ${env.receiver} within ${env.timeout_ms} ms`, { code: 'request_timeout', severity: 'retryable' }));
      }, env.timeout_ms);
      this.waiting.set(env.msg_id, {
        resolve: (reply) => {
          clearTimeout(timer);
          if (reply.msg_type === 'error') {
            const info = reply.error_info ?? {};
            reject(new ReachError(info.reason, info));
          } else resolve(reply);
        },
        reject: (err) => { clearTimeout(timer); reject(err); },
      });
      this.sendEnvelope(env);
    });
  }
}

/** What a handler gets: the request, its deadline, and calls to other agents. */
export class RemoteContext {
  constructor(agent, request, deadline) {
    this.agent = agent;
    this.request = request;
    this.deadline = deadline;
  }

  remainingMs() {
    return this.deadline === null ? null : this.deadline - Date.now();
  }

  _envelope(msgType, receiver, payload, schema, timeoutMs) {
    const env = {
      msg_id: newId(), msg_type: msgType, sender: this.agent.agentId, receiver, payload,
      payload_schema: schema, trace_id: this.request.trace_id,
      hops: [...(this.request.hops ?? []), this.agent.agentId], timestamp: Date.now() / 1000,
    };
    if (msgType === 'request') {
      const left = this.remainingMs();
      env.timeout_ms = Math.max(1, Math.floor(left === null ? timeoutMs : Math.min(timeoutMs, left)));
    }
    return env;
  }

  /** A request to one agent by ID; resolves with the reply's payload envelope. */
  request(agentId, payload, schema, { timeoutMs = 30000 } = {}) {
    return this.agent.call(this._envelope('request', agentId, payload, schema, timeoutMs));
  }

  /** A request to the least-loaded online holder of a capability. */
  requestCapability(capability, payload, schema, options = {}) {
    return this.request(`cap:${capability}`, payload, schema, options);
  }

  notify(agentId, payload, schema) {
    this.agent.sendEnvelope(this._envelope('notification', agentId, payload, schema));
  }
}

class DeadlineError extends Error {}

function withDeadline(promise, deadline) {
  if (deadline === null) return promise;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new DeadlineError()), Math.max(0, deadline - Date.now()));
    Promise.resolve(promise).then((v) => { clearTimeout(timer); resolve(v); }, (e) => { clearTimeout(timer); reject(e); });
  });
}

// -- the calculator the integration tests run ----------------------------------------------------

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function calculator(options) {
  return new RemoteAgent({
    capabilities: ['math.add', 'math.count'],
    description: 'A JavaScript calculator: adds two whole numbers and counts up to a number.',
    handlers: {
      'test.add@1.0': {
        returns: 'test.sum@1.0',
        jsonSchema: { type: 'object', properties: { a: { type: 'integer' }, b: { type: 'integer' } }, required: ['a', 'b'] },
        handle: async (p) => {
          if (p.sleep_s) await sleep(p.sleep_s * 1000);
          if (p.fail) throw new ReachError(`asked to fail ${p.fail}`, { severity: p.fail });
          return { total: p.a + p.b, by: options.agentId };
        },
      },
      'test.count@1.0': {
        returns: 'test.tick@1.0',
        streaming: true,
        handle: async function* count(p) {
          for (let n = 1; n <= p.upto; n += 1) yield { n };
        },
      },
      'test.relay@1.0': {
        returns: 'test.sum@1.0',
        handle: async (p, ctx) => (await ctx.requestCapability(p.capability, { a: p.a, b: p.b }, 'test.add@1.0')).payload,
      },
    },
    ...options,
  });
}

function option(name, fallback) {
  const at = process.argv.indexOf(`--${name}`);
  return at > 0 && at + 1 < process.argv.length ? process.argv[at + 1] : fallback;
}

async function main() {
  const out = (obj) => process.stdout.write(`${JSON.stringify(obj)}\n`);
  const agent = calculator({
    url: option('gateway', 'ws://127.0.0.1:8000'), agentId: option('id', 'calc-js-1'),
    token: option('token', process.env.REACH_TOKEN), secret: option('secret', process.env.REACH_AGENT_SECRET),
    log: (event) => out(event),
  });
  agent.onWelcome = (frame) => out({ welcome: frame });
  agent.onClose = (code, reason) => out({ closed: code, reason });
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.on(signal, () => agent.stop('stopped').then(() => process.exit(0)));
  }
  try {
    await agent.start();
  } catch (err) {
    out({ refused: String(err.message) });
    process.exit(1);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) main();
