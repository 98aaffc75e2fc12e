// An A2A client written with the official A2A JavaScript SDK (@a2a-js/sdk 1.x, A2A 1.0): resolves
// an agent card, sends one message, and prints what came back as one JSON object, for reach's
// interop tests (against reach's gateway, or any A2A 1.0 agent).
//
//   node call_gateway.mjs --url URL [--token TOKEN] [--text TEXT] [--data JSON]
//                         [--metadata JSON] [--stream] [--get] [--trace]
//
// URL is the agent's base URL (its card at /.well-known/agent-card.json) or the card's own URL.
// --token sends `Authorization: Bearer TOKEN` with every call (not with the card's fetch: cards
// are public). --stream uses SendStreamingMessage, --get reads the task back with GetTask.
// --trace starts a trace: the calls carry a W3C `traceparent` header the client makes itself (a
// new trace ID, a span ID of its own as the parent, sampled), printed as "traceparent".
//
// Prints {"card": {...}, "result": {...}, "events": [...], "task": {...}} (the A2A 1.0 JSON of
// each), or {"card": ..., "error": {"name", "message", "code"}} when a call fails. Exits 0 when
// it printed, 2 on a usage error.

import { randomBytes, randomUUID } from 'node:crypto';

import { AgentCard, Message, Role, StreamResponse, Task } from '@a2a-js/sdk';
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from '@a2a-js/sdk/client';

function parseArgs(argv) {
  const args = { stream: false, get: false, trace: false };
  for (let i = 0; i < argv.length; i += 1) {
    const name = argv[i].replace(/^--/, '');
    if (name === 'stream' || name === 'get' || name === 'trace') args[name] = true;
    else args[name] = argv[(i += 1)];
  }
  return args;
}

function cardLocation(url) {
  // The SDK resolves the card's path against the base as a browser resolves a link: a base URL
  // with a path keeps its last segment only when it ends in "/". A card's own URL is absolute.
  if (url.includes('/.well-known/') || url.endsWith('.json')) return [url, url];
  return [url.endsWith('/') ? url : `${url}/`, undefined];
}

function part(kind, value) {
  return { content: { $case: kind, value }, metadata: undefined, filename: '',
    mediaType: kind === 'text' ? 'text/plain' : 'application/json' };
}

// A W3C trace context starting a trace: version 00, a random trace ID and parent span ID (never
// all zeros, which W3C forbids), flags 01 (sampled).
function newTraceparent() {
  const hex = (bytes) => {
    let id;
    do id = randomBytes(bytes).toString('hex'); while (/^0+$/.test(id));
    return id;
  };
  return `00-${hex(16)}-${hex(8)}-01`;
}

function describeError(err) {
  return { name: err?.constructor?.name ?? 'Error', message: String(err?.message ?? err), code: err?.code ?? null };
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  if (!args.url || (args.text === undefined && args.data === undefined)) {
    console.error('usage: node call_gateway.mjs --url URL [--token T] (--text TEXT | --data JSON) [--metadata JSON] [--stream] [--get] [--trace]');
    process.exit(2);
  }
  const [base, path] = cardLocation(args.url);
  const card = await new DefaultAgentCardResolver().resolve(base, path);
  const out = {
    card: { name: card.name, skills: card.skills.map((s) => s.id), streaming: Boolean(card.capabilities?.streaming), json: AgentCard.toJSON(card) },
  };
  const factory = new ClientFactory(ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory(), new RestTransportFactory()],
  }));
  const client = await factory.createFromAgentCard(card);
  const headers = {};
  if (args.token) headers.Authorization = `Bearer ${args.token}`;
  if (args.trace) headers.traceparent = out.traceparent = newTraceparent();
  const options = Object.keys(headers).length ? { serviceParameters: headers } : {};

  const parts = [];
  if (args.text !== undefined) parts.push(part('text', args.text));
  if (args.data !== undefined) parts.push(part('data', JSON.parse(args.data)));
  const request = {
    tenant: '',
    metadata: {},
    configuration: undefined,
    message: {
      messageId: randomUUID(), role: Role.ROLE_USER, parts, taskId: '', contextId: '',
      extensions: [], metadata: args.metadata ? JSON.parse(args.metadata) : {}, referenceTaskIds: [],
    },
  };
  try {
    let taskId;
    if (args.stream) {
      out.events = [];
      for await (const event of client.sendMessageStream(request, options)) {
        out.events.push(StreamResponse.toJSON(event));
        const payload = event.payload;
        taskId = taskId ?? (payload?.$case === 'task' ? payload.value.id : payload?.value?.taskId);
      }
    } else {
      const result = await client.sendMessage(request, options);
      const isTask = 'status' in result && 'artifacts' in result;
      out.result = { kind: isTask ? 'task' : 'message', json: isTask ? Task.toJSON(result) : Message.toJSON(result) };
      taskId = isTask ? result.id : undefined;
    }
    if (args.get && taskId) {
      out.task = Task.toJSON(await client.getTask({ tenant: '', id: taskId, historyLength: undefined }, options));
    }
  } catch (err) {
    out.error = describeError(err);
  }
  console.log(JSON.stringify(out));
}

main().catch((err) => {
  console.log(JSON.stringify({ error: describeError(err) }));
  process.exit(1);
});
