// A refund agent written with the official A2A JavaScript SDK (@a2a-js/sdk 1.x, A2A 1.0),
// for reach's interop tests: reach agents call it through an outbound proxy, like any agent.
//
//   node refund_agent.mjs --port 41241 [--host 127.0.0.1]
//
// Skill `refunds.issue`: a data part {order_id, amount} (or a text naming an order) gets a task
// that streams a status update and the refund as an artifact (text, then data), then completes.
// The reply's data echoes the reach trace ID it found in the message's metadata
// (`{"reach": {"trace_id", "sender"}}`). Test hooks, by text: "slow" never finishes (until canceled), "fail" ends
// the task failed, "reject" rejects it. Once listening it prints one JSON line:
// {"listening": <port>}; each message it takes is logged as {"seen": {...}} on stdout, and each
// JSON-RPC call's `traceparent` header (null without one) as {"received": {"traceparent": ...}}.

import express from 'express';
import { randomUUID } from 'node:crypto';

import { AGENT_CARD_PATH, Role, TaskState } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';

function option(name, fallback) {
  const at = process.argv.indexOf(`--${name}`);
  return at > 0 && at + 1 < process.argv.length ? process.argv[at + 1] : fallback;
}

const PORT = Number(option('port', '41241'));
const HOST = option('host', '127.0.0.1');

const card = {
  name: 'Refund Agent',
  description: 'Issues refunds for orders (Node, @a2a-js/sdk). Needs an order ID and an amount.',
  supportedInterfaces: [
    { url: `http://${HOST}:${PORT}/a2a/jsonrpc`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
  ],
  provider: { organization: 'reach interop', url: 'https://example.com/reach' },
  version: '1.0.0',
  capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ['text/plain', 'application/json'],
  defaultOutputModes: ['text/plain', 'application/json'],
  skills: [
    {
      id: 'refunds.issue',
      name: 'Issue a refund',
      description: 'Refunds an order: data {order_id, amount}, or a text naming the order.',
      tags: ['refunds', 'payments'],
      examples: ['{"order_id": "A-1024", "amount": 30}', 'refund order A-1024'],
      inputModes: ['text/plain', 'application/json'],
      outputModes: ['text/plain', 'application/json'],
      securityRequirements: [],
    },
  ],
  documentationUrl: '',
  signatures: [],
};

const textPart = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' });
const dataPart = (value) => ({ content: { $case: 'data', value }, metadata: undefined, filename: '', mediaType: 'application/json' });
const status = (state, text, taskId, contextId) => ({
  state,
  timestamp: new Date().toISOString(),
  message: text === undefined ? undefined : {
    role: Role.ROLE_AGENT, messageId: randomUUID(), parts: [textPart(text)], taskId, contextId,
    extensions: [], metadata: {}, referenceTaskIds: [],
  },
});

class RefundExecutor {
  constructor() {
    this.canceled = new Set();
    this.waiting = new Map();
  }

  async execute(requestContext, eventBus) {
    const message = requestContext.userMessage;
    const { taskId, contextId } = requestContext;
    const metadata = message.metadata ?? {};
    let text = '';
    let data;
    for (const part of message.parts) {
      if (part.content?.$case === 'text') text += part.content.value;
      if (part.content?.$case === 'data' && data === undefined) data = part.content.value;
    }
    const traceId = metadata.reach?.trace_id ?? null;
    console.log(JSON.stringify({ seen: { task_id: taskId, trace_id: traceId, sender: metadata.reach?.sender ?? null, text, data: data ?? null } }));

    const publishStatus = (state, said) =>
      eventBus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: status(state, said, taskId, contextId), metadata: {} }));
    try {
      if (!requestContext.task) {
        eventBus.publish(AgentEvent.task({
          id: taskId, contextId, status: status(TaskState.TASK_STATE_SUBMITTED), artifacts: [],
          history: [message], metadata: {},
        }));
      }
      if (text === 'reject') {
        publishStatus(TaskState.TASK_STATE_REJECTED, 'refunds for that order are not mine to give');
        return;
      }
      publishStatus(TaskState.TASK_STATE_WORKING, 'checking the order');
      if (text === 'slow') {
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, 600_000);
          this.waiting.set(taskId, () => { clearTimeout(timer); resolve(); });
        });
      }
      if (this.canceled.has(taskId)) {
        publishStatus(TaskState.TASK_STATE_CANCELED);
        return;
      }
      if (text === 'fail') {
        publishStatus(TaskState.TASK_STATE_FAILED, 'the payment provider refused the refund');
        return;
      }
      const orderId = data?.order_id ?? (text.match(/[A-Z]-\d+/) ?? ['unknown'])[0];
      const amount = data?.amount ?? 0;
      const artifact = (parts) => ({ artifactId: 'refund', name: 'refund', description: 'The refund issued', parts, metadata: undefined, extensions: [] });
      eventBus.publish(AgentEvent.artifactUpdate({
        taskId, contextId, artifact: artifact([textPart(`Refund of ${amount} for order ${orderId} issued.`)]),
        append: false, lastChunk: false, metadata: undefined,
      }));
      eventBus.publish(AgentEvent.artifactUpdate({
        taskId, contextId,
        artifact: artifact([dataPart({ refund_id: `R-${orderId}`, order_id: orderId, amount, status: 'issued', trace_id: traceId, agent: 'node' })]),
        append: true, lastChunk: true, metadata: undefined,
      }));
      publishStatus(TaskState.TASK_STATE_COMPLETED);
    } finally {
      this.canceled.delete(taskId);
      this.waiting.delete(taskId);
    }
  }

  cancelTask = async (taskId) => {
    this.canceled.add(taskId);
    this.waiting.get(taskId)?.();
  };
}

const requestHandler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new RefundExecutor());
const app = express();
app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: requestHandler }));
// Each JSON-RPC call's W3C trace context, as it arrived (a traced caller sends its span as the
// parent): logged before the SDK handles the call.
app.use('/a2a/jsonrpc', (req, res, next) => {
  if (req.method === 'POST') console.log(JSON.stringify({ received: { traceparent: req.get('traceparent') ?? null } }));
  next();
});
app.use('/a2a/jsonrpc', jsonRpcHandler({ requestHandler, userBuilder: UserBuilder.noAuthentication }));

const server = app.listen(PORT, HOST, (err) => {
  if (err) {
    console.error(err);
    process.exit(1);
  }
  console.log(JSON.stringify({ listening: server.address().port }));
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
