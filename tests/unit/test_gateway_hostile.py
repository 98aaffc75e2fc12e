"""The A2A gateway against a hostile outsider, on the fake cluster: the probe of issue 21 as a
table (each row an input, the answer it must get, and a legitimate call that must still work
after it), tasks private between two principals, and replies that are not JSON."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from test_gateway_server import Orders, call, on_gateway, order, rpc, send, sse

import reach
from reach.a2a.server._proto import MAX_VALUE_DEPTH
from reach.errors import Severity
from reach.gateway.server import GatewayServer
from reach.security.guard import SecurityConfig, resolve_keyring
from reach.strict_json import depth
from reach.testing import FakeCluster
from reach.web.auth import token_for

#: Words of Python's or SQLite's own errors: a client must never see them.
INTERNALS = ("Traceback", "Exceeds the limit", "recursion", "codec can't", "SQLite",
             "Python int", "Fail to serialize", "set_int_max_str_digits", "Error(")


@pytest.fixture
def signed(tmp_path: Any) -> SecurityConfig:
    return SecurityConfig(sign=True, keyring=resolve_keyring(tmp_path / "keyring.json",
                                                             create=True))


def raw(params_json: str, *, method: str = "SendMessage", rid: str = "1") -> bytes:
    return (f'{{"jsonrpc": "2.0", "id": {rid}, "method": "{method}", '
            f'"params": {params_json}}}').encode()


def message_json(data: str = '{"order_id": 1}', *, role: str = '"ROLE_USER"',
                 metadata: str = "{}") -> str:
    return (f'{{"message": {{"messageId": "m-1", "role": {role}, "metadata": {metadata}, '
            f'"parts": [{{"data": {data}}}]}}}}')


def _deep(levels: int) -> Any:
    deep: Any = 1
    for _ in range(levels):
        deep = {"a": deep}
    return deep


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@dataclass(frozen=True)
class Probe:
    """One row: what is sent, and what must come back (an HTTP status, and a JSON-RPC error
    code whose message says ``says``, or a result that ``result`` accepts)."""

    name: str
    body: bytes | dict[str, Any]
    code: int | None
    says: str = ""
    status: int = 200
    path: str = "/agents/orders-1"
    headers: dict[str, str] = field(default_factory=dict)
    result: Callable[[Any], bool] | None = None


def _no_tasks(result: Any) -> bool:
    return isinstance(result, dict) and result.get("tasks", []) == []


PROBES = [
    # The defects of issue 21: each answered -32603 with Python's words, or was accepted.
    Probe("a 5,000-digit id", raw('{"id": "x"}', method="GetTask", rid="9" * 5000),
          -32700, "digits is out of range"),
    Probe("a 400-digit integer in a data part", raw(message_json('{"order_id": 1' + "0" * 399
                                                                 + "}")),
          -32700, "400 digits"),
    Probe("1e999 in a data part", raw(message_json('{"order_id": 1e999}')), -32700, "1e999"),
    Probe("NaN in a data part", raw(message_json('{"order_id": NaN}')), -32700, "NaN"),
    Probe("Infinity as the id", raw('{"id": "x"}', method="GetTask", rid="Infinity"),
          -32700, "Infinity"),
    Probe("-Infinity in the metadata", raw(message_json(metadata='{"x": -Infinity}')),
          -32700, "-Infinity"),
    Probe("100k-deep nesting", raw(nested(100_000), method="GetTask"), -32700, "nested"),
    Probe("70-deep nesting in a data part",
          raw(message_json('{"order_id": 1, "x": ' + nested(70) + "}")), -32700, "nested"),
    Probe("a data part 34 objects deep (a task protobuf cannot decode)",  # found in the probe
          raw(message_json(json.dumps({"order_id": 1, "x": _deep(33)}))), -32700, "nested"),
    Probe("invalid UTF-8 in the method", b'{"jsonrpc": "2.0", "id": 1, "method": "Get\xff\xfeTask"'
          b', "params": {}}', -32700, "UTF-8"),
    Probe("an unpaired surrogate in the id", raw('{"id": "x"}', method="GetTask",
                                                 rid='"\\ud800"'), -32700, "surrogate"),
    Probe("a 5,000-digit A2A-Version", call("GetTask", id="x"), -32009, "5000 characters",
          headers={"A2A-Version": "9" * 5000}),
    Probe("a far-future statusTimestampAfter",
          call("ListTasks", statusTimestampAfter="9999-12-31T23:59:59Z"), None,
          result=_no_tasks),
    Probe("a message role of 123", raw(message_json(role="123")), -32602, "role 123"),
    Probe("a ListTasks status of 99", call("ListTasks", status=99), -32602, "status 99"),
    # What held already.
    Probe("truncated JSON", b'{"jsonrpc": "2.0", "id":', -32700),
    Probe("a JSON string for a request", b'"hello"', -32600),
    Probe("a batch", json.dumps([call("GetTask", id="x")]).encode(), -32600, "Batch"),
    Probe("jsonrpc 1.0", {**call("GetTask", id="x"), "jsonrpc": "1.0"}, -32600, "2.0"),
    Probe("no method", {"jsonrpc": "2.0", "id": 1, "params": {}}, -32600),
    Probe("an object as the id", {**call("GetTask", id="x"), "id": {"a": 1}}, -32600),
    Probe("an unknown method", call("NoSuchMethod"), -32601),
    Probe("a historyLength of 'many'", call("GetTask", id="x", historyLength="many"),
          -32602),
    Probe("an unknown role name", raw(message_json(role='"ROLE_ADMIN"')), -32602,
          "Validation failed"),
    Probe("an oversize body", send(order(1, note="x" * (1 << 20))), -32600,
          "(1048576 bytes)", status=413),
    Probe("no token", send(order(1)), None, status=401, headers={"Authorization": ""}),
    Probe("a forged token", send(order(1)), None, status=401,
          headers={"Authorization": "Bearer prober." + "0" * 64}),
    Probe("a token that is not Bearer", send(order(1)), None, status=401,
          headers={"Authorization": "Basic cHJvYmVyOng="}),
    Probe("a name with a space", send(order(1)), None, status=401,
          headers={"Authorization": "Bearer pro ber." + "0" * 64}),
    Probe("an agent ID with ../", send(order(1)), None, status=404,
          path="/agents/..%2F..%2Forders-1"),
    Probe("a process name for an agent ID", send(order(1)), -32602, "is registered",
          path="/agents/reach.registry"),
    Probe("a NUL in an agent ID", send(order(1)), -32602, "is registered",
          path="/agents/orders-1%00"),
    Probe("A2A-Version 2.0", call("GetTask", id="x"), -32009, "2.0",
          headers={"A2A-Version": "2.0"}),
    Probe("A2A-Version 0.3", send(order(1)), -32009, "0.3", headers={"A2A-Version": "0.3"}),
]


async def _probe(client: httpx.AsyncClient, probe: Probe) -> list[str]:
    """What is wrong with the answer to one probe (nothing: an empty list)."""
    content = probe.body if isinstance(probe.body, bytes) else json.dumps(probe.body).encode()
    headers = {"Content-Type": "application/json", **probe.headers}
    if headers.get("Authorization") == "":
        headers.pop("Authorization")
        client.headers.pop("Authorization", None)
    reply = await client.post(probe.path, content=content, headers=headers)
    wrong = [f"the answer holds {word!r}: {reply.text[:200]}" for word in INTERNALS
             if word in reply.text]
    if reply.status_code != probe.status:
        return [*wrong, f"HTTP {reply.status_code}, not {probe.status}: {reply.text[:200]}"]
    if probe.status in (401, 404):
        return wrong
    answer = reply.json()
    if probe.code is None:
        if "result" not in answer or (probe.result and not probe.result(answer["result"])):
            wrong.append(f"no such result: {reply.text[:200]}")
        return wrong
    error = answer.get("error", {})
    if error.get("code") != probe.code:
        wrong.append(f"code {error.get('code')}, not {probe.code}: {reply.text[:200]}")
    elif probe.says not in error.get("message", ""):
        wrong.append(f"the message does not say {probe.says!r}: {error.get('message')!r}")
    return wrong


def test_every_probe_gets_its_answer_and_a_legitimate_call_works_after_it(
        signed: SecurityConfig) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        token = client.headers["Authorization"]
        failures: dict[str, list[str]] = {}
        for probe in PROBES:
            wrong = await _probe(client, probe)
            client.headers["Authorization"] = token
            after = await rpc(client, send(order(2)))
            if after.get("result", {}).get("task", {}).get("status", {}).get("state") != (
                    "TASK_STATE_COMPLETED"):
                wrong.append(f"a legitimate call after it failed: {after}")
            if wrong:
                failures[probe.name] = wrong
        assert failures == {}

    on_gateway(scenario, security=signed, token="prober")


def test_an_altered_token_is_refused(signed: SecurityConfig) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        guard = fake.guard()
        assert guard is not None
        good = token_for(guard.keyring, "prober")
        for altered in (good[:-1] + ("0" if good[-1] != "0" else "1"),  # one digit changed
                        "other" + good[len("prober"):],  # another name, the same MAC
                        good + "0"):
            refused = await client.post("/agents/orders-1", json=send(order(1)),
                                        headers={"Authorization": f"Bearer {altered}"})
            assert (refused.status_code, refused.json()["reason"]) == (401, "invalid_token")
        assert (await rpc(client, send(order(1))))["result"]["task"]["status"]["state"] == (
            "TASK_STATE_COMPLETED")

    on_gateway(scenario, security=signed, token="prober")


def test_principal_b_cannot_get_list_cancel_or_follow_principal_as_tasks(
        signed: SecurityConfig) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        guard = fake.guard()
        assert guard is not None
        other = {"Authorization": f"Bearer {token_for(guard.keyring, 'other')}"}
        done = (await rpc(client, send(order(1))))["result"]["task"]
        running = (await rpc(client, send(order(9, sleep_s=60), returnImmediately=True)))
        running_id = running["result"]["task"]["id"]

        async def as_other(body: dict[str, Any]) -> dict[str, Any]:
            reply = await client.post("/agents/orders-1", json=body, headers=other)
            answer: dict[str, Any] = reply.json()
            return answer

        for task_id in (done["id"], running_id):
            assert (await as_other(call("GetTask", id=task_id)))["error"]["code"] == -32001
            assert (await as_other(call("CancelTask", id=task_id)))["error"]["code"] == -32001
        assert (await as_other(call("ListTasks")))["result"].get("tasks", []) == []
        subscribed = await client.post("/agents/orders-1", headers=other,
                                       json=call("SubscribeToTask", id=running_id))
        assert '"code":-32001' in subscribed.text.replace(" ", "")
        assert Orders.cancelled == []  # other's cancel touched nothing

        mine = (await rpc(client, call("ListTasks")))["result"]["tasks"]
        assert {t["id"] for t in mine} == {done["id"], running_id}
        got = (await rpc(client, call("GetTask", id=running_id)))["result"]
        assert got["status"]["state"] == "TASK_STATE_WORKING"
        cancelled = (await rpc(client, call("CancelTask", id=running_id)))["result"]
        assert cancelled["status"]["state"] == "TASK_STATE_CANCELED"

    on_gateway(scenario, security=signed, token="prober")


# -- replies that are not JSON -------------------------------------------------------------


@reach.schema("gwhostile.ask@1.0")
class Ask(BaseModel):
    what: str  # a float's name ("nan", "inf", "1.5"), "partial", "details" or "deep N"


@reach.schema("gwhostile.reading@1.0")
class Reading(BaseModel):
    value: float
    extra: Any = None


class Meter(reach.Agent):
    capabilities = ("meter.read",)
    description = "Reads a meter, which may answer NaN."

    @reach.handler(Ask, returns=Reading)
    async def read(self, ctx: reach.Context, m: Ask) -> Reading:
        if m.what == "partial":
            raise reach.ReachError("the meter half broke", severity=Severity.DEGRADABLE,
                                   partial={"value": float("nan")})
        if m.what == "details":
            raise reach.ReachError("the meter broke", details={"reading": float("inf")})
        if m.what.startswith("deep "):
            return Reading(value=1.0, extra=_deep(int(m.what.split()[1])))
        return Reading(value=float(m.what))

    @reach.handler(reach.Text, returns=Reading)
    async def watch(self, ctx: reach.Context, m: reach.Text) -> AsyncIterator[Reading]:
        for word in m.text.split():
            yield Reading(value=float(word))


def ask(what: str) -> list[dict[str, Any]]:
    return [{"data": {"what": what}}]


def on_meter(scenario: Callable[[FakeCluster, httpx.AsyncClient], Any]) -> None:
    async def with_meter(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        await fake.runtime().spawn(Meter, "meter", placement=reach.Packed())
        await scenario(fake, client)

    on_gateway(with_meter, auth=False)


async def _still_readable(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    got = await rpc(client, call("GetTask", id=task_id), "/agents/meter")
    listed = await rpc(client, call("ListTasks", includeArtifacts=True), "/agents/meter")
    assert task_id in [t["id"] for t in listed["result"]["tasks"]], listed
    again = await rpc(client, send(ask("1.5")), "/agents/meter")
    assert again["result"]["task"]["artifacts"][0]["parts"][0]["data"]["value"] == 1.5
    result: dict[str, Any] = got["result"]
    return result


@pytest.mark.parametrize("what", ["nan", "inf", "-inf"])
def test_a_reply_holding_nan_or_infinity_fails_the_task_which_stays_readable(what: str) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        task = (await rpc(client, send(ask(what)), "/agents/meter"))["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        error = task["metadata"]["reach"]["error"]
        assert (error["code"], error["details"]["path"]) == ("codec_error", "$.value")
        assert "not JSON" in task["status"]["message"]["parts"][0]["text"]
        assert "artifacts" not in task
        got = await _still_readable(client, task["id"])
        assert got["status"]["state"] == "TASK_STATE_FAILED"

    on_meter(scenario)


def test_a_stream_chunk_holding_nan_fails_the_task_after_the_chunks_before_it() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        events = [e["result"] for e in await sse(client, send(
            [{"text": "1 2 nan 3"}], method="SendStreamingMessage"), "/agents/meter")]
        chunks = [p["data"]["value"] for e in events if "artifactUpdate" in e
                  for p in e["artifactUpdate"]["artifact"]["parts"]]
        assert chunks == [1, 2]
        final = events[-1]["statusUpdate"]
        assert final["status"]["state"] == "TASK_STATE_FAILED"
        assert final["metadata"]["reach"]["error"]["code"] == "codec_error"
        got = await _still_readable(client, events[0]["task"]["id"])
        assert got["status"]["state"] == "TASK_STATE_FAILED"

    on_meter(scenario)


def test_a_partial_result_or_error_details_holding_nan_leave_a_readable_task() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        partial = (await rpc(client, send(ask("partial")), "/agents/meter"))["result"]["task"]
        assert partial["status"]["state"] == "TASK_STATE_FAILED"
        assert partial["metadata"]["reach"]["error"]["code"] == "codec_error"
        await _still_readable(client, partial["id"])
        broke = (await rpc(client, send(ask("details")), "/agents/meter"))["result"]["task"]
        assert broke["status"]["state"] == "TASK_STATE_FAILED"
        assert broke["metadata"]["reach"]["error"]["details"] == {"reading": "inf"}
        await _still_readable(client, broke["id"])

    on_meter(scenario)


def test_a_stored_task_holding_nan_is_read_and_saved_with_it_made_null() -> None:
    from a2a.types.a2a_pb2 import Artifact, Part, Task, TaskState, TaskStatus

    from reach.web.auth import ANONYMOUS

    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        poisoned = Task(id="old-task", context_id="ctx",
                        status=TaskStatus(state=TaskState.TASK_STATE_COMPLETED),
                        artifacts=[Artifact(artifact_id="reply", parts=[Part()])])
        poisoned.artifacts[0].parts[0].data.struct_value.update({"value": 1.0, "bad": 2.0})
        poisoned.artifacts[0].parts[0].data.struct_value["bad"] = float("nan")
        # A row as an older version stored it, past the store's own check.
        await fake.a2a_tasks().a2a_save_many([("old-task", ANONYMOUS, "ctx",
                                           int(poisoned.status.state), None,
                                           poisoned.SerializeToString())])
        got = (await rpc(client, call("GetTask", id="old-task")))["result"]
        assert got["artifacts"][0]["parts"][0]["data"] == {"value": 1, "bad": None}
        listed = (await rpc(client, call("ListTasks", includeArtifacts=True)))["result"]
        assert [t["id"] for t in listed["tasks"]] == ["old-task"]

        server: GatewayServer = fake.services["reach-gateway"]
        poisoned.id = "new-task"
        await server.store.inner.save(poisoned, _context())
        assert poisoned.artifacts[0].parts[0].data.struct_value["bad"] is None
        got = (await rpc(client, call("GetTask", id="new-task")))["result"]
        assert got["artifacts"][0]["parts"][0]["data"]["bad"] is None

    on_gateway(scenario, auth=False)


def _context() -> Any:
    from a2a.server.context import ServerCallContext

    from reach.a2a.server.handler import Caller
    from reach.web.auth import ANONYMOUS

    return ServerCallContext(user=Caller(ANONYMOUS))


# -- reach's own faults ----------------------------------------------------------------------


def test_a_fault_of_reach_is_minus_32603_with_an_error_id_and_the_story_in_the_log(
        caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        server: GatewayServer = fake.services["reach-gateway"]

        async def broken(*args: Any) -> Any:
            raise RuntimeError("disk /srv/secret/tasks.db is on fire")

        server.store.inner.get = broken  # type: ignore[method-assign]
        with caplog.at_level(logging.ERROR, logger="reach.a2a.server.errors"):
            error = (await rpc(client, call("GetTask", id="x")))["error"]
        assert error["code"] == -32603
        assert "secret" not in json.dumps(error)
        error_id = error["data"][0]["metadata"]["error_id"]
        assert error_id in error["message"]
        (logged,) = [r for r in caplog.records
                     if r.name == "reach.a2a.server.errors" and error_id in r.getMessage()]
        assert "on fire" in logged.getMessage()
        assert logged.exc_info is not None

    on_gateway(scenario, auth=False)


def test_a_stream_that_breaks_midway_ends_with_a_minus_32603_without_internals() -> None:
    from a2a.types.a2a_pb2 import Task, TaskState, TaskStatus

    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        server: GatewayServer = fake.services["reach-gateway"]

        async def breaking(params: Any, context: Any) -> AsyncIterator[Any]:
            yield Task(id=params.id, context_id="c",
                       status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
            await asyncio.sleep(0)
            raise KeyError("internal-key-of-reach")

        server.handler.on_subscribe_to_task = breaking  # type: ignore[method-assign]
        async with client.stream("POST", "/agents/orders-1",
                                 json=call("SubscribeToTask", id="t")) as reply:
            text = "".join([line async for line in reply.aiter_lines()])
        assert '"code":-32603' in text.replace(" ", "")
        assert "error ID" in text
        assert "internal-key-of-reach" not in text

    on_gateway(scenario, auth=False)


def test_a_payload_as_deep_as_the_limit_goes_through_and_stays_readable() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        body = send(order(1, extra=_deep(32 - 6)))  # the envelope has 5 levels, the order 1
        assert depth(body) == 32
        task = (await rpc(client, body))["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        got = (await rpc(client, call("GetTask", id=task["id"])))["result"]
        assert got["history"][0]["parts"][0]["data"]["extra"] == _deep(26)
        listed = (await rpc(client, call("ListTasks", includeArtifacts=True)))["result"]
        assert [t["id"] for t in listed["tasks"]] == [task["id"]]
        deeper = (await rpc(client, send(order(1, extra=_deep(27)))))["error"]
        assert deeper["code"] == -32700

    on_gateway(scenario, auth=False)

    on_gateway(scenario, auth=False)


def test_a_reply_nested_deeper_than_a_task_can_hold_fails_the_task_readably() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        fits = (await rpc(client, send(ask(f"deep {MAX_VALUE_DEPTH - 1}")),
                          "/agents/meter"))["result"]["task"]
        assert fits["status"]["state"] == "TASK_STATE_COMPLETED"
        task = (await rpc(client, send(ask("deep 40")), "/agents/meter"))["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        assert task["metadata"]["reach"]["error"]["details"]["rule"] == "depth"
        await _still_readable(client, task["id"])
        await _still_readable(client, fits["id"])

    on_meter(scenario)


def test_no_card_is_served_for_a_process_of_reach_or_a_path_trick() -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient) -> None:
        processes = fake.names("reach.")
        assert "reach.registry" in processes
        for agent_id in [*processes, "%2e%2e", "orders-1%00", "x" * 10_000]:
            card = await client.get(f"/agents/{agent_id}/.well-known/agent-card.json")
            assert card.status_code == 404, agent_id
            assert card.json()["error"] == "not_found"
        assert (await client.get("/agents/orders-1/.well-known/agent-card.json")).json()[
            "name"] == "orders-1"

    on_gateway(scenario, auth=False)
