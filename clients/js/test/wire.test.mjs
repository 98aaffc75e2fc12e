// The JavaScript agent against the documented wire: the hello's test vector, and a whole
// exchange with a small gateway stand-in (a ws server in this test) that checks what it gets.
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { test } from 'node:test';

import { WebSocketServer } from 'ws';

import { agentSecret, calculator, connectUrl, helloMac, makeHello } from '../reach-agent.mjs';

const MASTER = Buffer.from([...Array(32).keys()]);

test('the secret and the hello signature match the vector of docs/wire.md', () => {
  const secret = agentSecret(MASTER, 'calc-1');
  assert.equal(secret.toString('hex'), '971df6d6ca18df4e65ede3fe08f87eba45569eb991bedb02a622a8c9dc43dafb');
  const mac = helloMac(secret, 'calc-1', 1750000000000, 'ab'.repeat(16), '{"capabilities":["math.add"]}');
  assert.equal(mac, 'a3620c3f939da20894d3100ddc40463c019e9c1c811a67b2c8bb9d569bd18834');
});

test('a hello signs its declaration as sent', () => {
  const secret = agentSecret(MASTER, 'a-1');
  const hello = makeHello('a-1', { capabilities: ['x.y'] }, secret, { nowMs: 5, nonce: 'cd'.repeat(16) });
  const expected = createHmac('sha256', secret)
    .update(`reach-hello/1\na-1\n5\n${'cd'.repeat(16)}\n${hello.declaration}`).digest('hex');
  assert.equal(hello.sig, expected);
  assert.deepEqual(JSON.parse(hello.declaration), { capabilities: ['x.y'] });
});

test('the connect URL comes from the gateway\'s', () => {
  assert.equal(connectUrl('http://gw:8000'), 'ws://gw:8000/v1/agents/connect');
  assert.equal(connectUrl('wss://gw/v1/agents/connect'), 'wss://gw/v1/agents/connect');
});

function request(msgId, schema, payload) {
  return { msg_id: msgId, msg_type: 'request', sender: 'driver:t', receiver: 'calc-js-t', payload,
    payload_schema: schema, timeout_ms: 5000, trace_id: 'trace-1', hops: [] };
}

test('the agent says hello, answers, streams, fails typed and says goodbye', async () => {
  const server = new WebSocketServer({ port: 0 });
  const seen = [];
  const done = new Promise((resolve) => {
    server.on('connection', (ws, req) => {
      assert.equal(req.headers.authorization, 'Bearer tok');
      ws.on('message', (data) => {
        const frame = JSON.parse(data.toString());
        if (frame.type === 'hello') {
          const secret = agentSecret(MASTER, frame.agent_id);
          assert.equal(frame.sig, helloMac(secret, frame.agent_id, frame.ts, frame.nonce, frame.declaration));
          const declared = JSON.parse(frame.declaration);
          assert.deepEqual(declared.capabilities, ['math.add', 'math.count']);
          ws.send(JSON.stringify({ type: 'welcome', v: 1, agent_id: frame.agent_id, epoch: 1, restarted: false, max_frame_bytes: 1 << 20, heartbeat_s: 15, queue_limit: 1000 }));
          ws.send(JSON.stringify({ type: 'batch', envelopes: [
            request('r1', 'test.add@1.0', { a: 2, b: 3 }),
            request('r2', 'test.count@1.1', { upto: 3 }),
            request('r3', 'test.add@1.0', { a: 1, b: 1, fail: 'degradable' }),
            request('r4', 'nope@1.0', {}),
          ] }));
          return;
        }
        if (frame.type === 'goodbye') { resolve(); return; }
        const items = frame.type === 'batch' ? frame.envelopes : [frame.envelope];
        seen.push(...items);
      });
    });
  });
  const { port } = server.address();
  const agent = calculator({ url: `ws://127.0.0.1:${port}`, agentId: 'calc-js-t', token: 'tok', secret: agentSecret(MASTER, 'calc-js-t') });
  const welcome = await agent.start();
  assert.equal(welcome.epoch, 1);
  while (seen.filter((e) => e.msg_type !== 'event').length < 4) await new Promise((r) => setTimeout(r, 10));
  await agent.stop('done');
  await done;
  server.close();
  const by = (id) => seen.filter((e) => e.request_id === id);
  assert.deepEqual(by('r1').map((e) => [e.msg_type, e.payload.total, e.sender, e.receiver, e.trace_id]),
    [['response', 5, 'calc-js-t', 'driver:t', 'trace-1']]);
  assert.deepEqual(by('r2').map((e) => [e.msg_type, e.payload_schema]),
    [['event', 'test.tick@1.0'], ['event', 'test.tick@1.0'], ['event', 'test.tick@1.0'], ['response', 'reach.stream.end@1.0']]);
  assert.deepEqual(by('r2').slice(0, 3).map((e) => e.payload.n), [1, 2, 3]);
  assert.equal(by('r3')[0].error_info.severity, 'degradable');
  assert.equal(by('r4')[0].error_info.code, 'schema_incompatible');
});
