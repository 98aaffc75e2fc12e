"""The observer on the gateway, on the fake cluster: its page public, its API behind the bearer
token, the supervision tree and a restart as the stream tells them, agents paged and searched,
dead letters, and traces (from a trace store made of a list) as listings and waterfalls. The
page itself, in a real browser on a real Ray, is in tests/integration/test_observer_browser.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import httpx
from pydantic import BaseModel
from starlette.applications import Starlette

import reach
from reach.gateway.deploy import start_gateway
from reach.gateway.server import GatewayServer
from reach.observe.routes import ObserverRoutes
from reach.observe.sampler import Sampler
from reach.ports.traces import TraceStorePort
from reach.records import DeadLetter
from reach.security.guard import SecurityConfig, resolve_keyring
from reach.spans import (
    Attr,
    SpanKind,
    SpanRecord,
    SpanStatus,
    TraceEdge,
    TraceStoreStats,
    TraceSummary,
)
from reach.testing import FakeCluster, eventually, run
from reach.web.auth import token_for
from reach.web.options import GatewayOptions


@reach.schema("obstest.ping@1.0")
class Ping(BaseModel):
    n: int = 0


class Clerk(reach.Agent):
    capabilities = ("desk.answer",)
    description = "Answers questions at the front desk; never refunds."

    @reach.handler(Ping, returns=Ping)
    async def ping(self, ctx: reach.Context, m: Ping) -> Ping:
        return m


class Courier(reach.Agent):
    capabilities = ("parcel.track", "parcel.pickup")
    description = "Tracks parcels and books pickups."

    @reach.handler(Ping, returns=Ping)
    async def ping(self, ctx: reach.Context, m: Ping) -> Ping:
        return m


Scenario = Callable[[FakeCluster, httpx.AsyncClient, str], Coroutine[Any, Any, None]]


def on_gateway(scenario: Scenario, folder: Path) -> None:
    """Runs ``scenario`` with a gateway (auth on), a supervised clerk and courier, and a client
    that sends no token (the scenario is given a valid one)."""

    async def main(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.supervise(reach.SupervisorSpec("obs-desk", children=[
            reach.ChildSpec(Clerk, "obs-clerk", placement=reach.Packed(pool="desk")),
            reach.ChildSpec(Courier, "obs-courier", placement=reach.Packed(pool="desk"))]))
        start_gateway(fake, GatewayOptions())
        server: GatewayServer = fake.services["reach-gateway"]
        guard = fake.guard()
        assert guard is not None
        async with httpx.AsyncClient(transport=httpx.ASGITransport(server.app),
                                     base_url="http://gw") as client:
            await scenario(fake, client, token_for(guard.keyring, "observer"))
        await server.close()

    run(main, security=SecurityConfig(keyring=resolve_keyring(folder / "keyring.json",
                                                              create=True)))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_page_is_public_and_every_api_call_needs_a_valid_token(tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient, token: str) -> None:
        page = await client.get("/observe")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["referrer-policy"] == "no-referrer"
        script = await client.get("/observe/static/observer.js")
        assert script.status_code == 200
        assert "Authorization" in script.text
        assert (await client.get("/observe/static/nothing.js")).status_code == 404
        assert (await client.get("/observe/static/..%2f__init__.py")).status_code == 404
        missing = await client.get("/observe/api/snapshot")
        assert (missing.status_code, missing.json()["reason"]) == (401, "missing_token")
        forged = await client.get("/observe/api/snapshot", headers=bearer("observer.00ff"))
        assert (forged.status_code, forged.json()["reason"]) == (401, "invalid_token")
        as_query = await client.get(f"/observe/api/snapshot?token={token}")
        assert as_query.status_code == 401  # a token is taken from the header only
        ok = await client.get("/observe/api/snapshot", headers=bearer(token))
        assert ok.status_code == 200

    on_gateway(scenario, tmp_path)


def test_an_a2a_callers_valid_token_may_not_read_the_observers_data(tmp_path: Path) -> None:
    # The observer shows the whole cluster: only the gateway's observers' tokens open it.
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient, token: str) -> None:
        guard = fake.guard()
        assert guard is not None
        partner = bearer(token_for(guard.keyring, "partner"))
        for path in ("/observe/api/snapshot", "/observe/api/agents", "/observe/api/letters"):
            refused = await client.get(path, headers=partner)
            assert refused.status_code == 403, path
            assert refused.json()["reason"] == "not_an_observer"
            assert "a2a:partner" in refused.json()["message"]
        assert (await client.get("/observe", headers=partner)).status_code == 200  # the page
        assert (await client.get("/observe/api/snapshot",
                                 headers=bearer(token))).status_code == 200

    on_gateway(scenario, tmp_path)


def test_the_snapshot_shows_the_tree_and_the_stream_tells_of_a_restart_where_it_happened(
        tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient, token: str) -> None:
        shot = (await client.get("/observe/api/snapshot", headers=bearer(token))).json()
        (root,) = shot["trees"]["roots"]
        assert root["name"] == "obs-desk"
        assert [(c["child_id"], c["status"], c["restarts"]) for c in root["children"]] == [
            ("obs-clerk", "online", 0), ("obs-courier", "online", 0)]
        assert shot["cluster"]["agents"]["online"] == 2
        assert shot["cluster"]["pools"] == {"desk": 2}

        server: GatewayServer = fake.services["reach-gateway"]
        stream = server.sampler.watch()
        first = await anext(stream)
        assert first["restarts"] == []
        assert "trees" in first
        host = (await fake.registry().lookup("obs-courier")).host
        fake.crash(host)
        restarts: list[dict[str, Any]] = []
        while not restarts:
            restarts = (await anext(stream))["restarts"]
        assert {r["child"] for r in restarts} >= {"obs-courier"}
        assert all(r["supervisor"] == "obs-desk" for r in restarts)
        await stream.aclose()

        async def counted() -> Any:
            shot = (await client.get("/observe/api/snapshot", headers=bearer(token))).json()
            kids = {c["child_id"]: c for c in shot["trees"]["roots"][0]["children"]}
            return kids["obs-courier"]["restarts"] >= 1 and kids["obs-courier"]

        courier = await eventually(counted)
        assert courier["last_reason"]

    on_gateway(scenario, tmp_path)


def test_agents_are_paged_and_searched_by_capability_and_description(tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient, token: str) -> None:
        async def agents(**query: str) -> dict[str, Any]:
            reply = await client.get("/observe/api/agents", params=query,
                                     headers=bearer(token))
            assert reply.status_code == 200, reply.text
            found: dict[str, Any] = reply.json()
            return found

        everyone = await agents()
        assert [a["agent_id"] for a in everyone["rows"]] == ["obs-clerk", "obs-courier"]
        assert everyone["rows"][1]["capabilities"] == {"parcel.track": 0, "parcel.pickup": 0}
        assert everyone["rows"][0]["host_kind"] == "pool"
        assert [a["agent_id"] for a in (await agents(capability="parcel"))["rows"]] == [
            "obs-courier"]
        assert [a["agent_id"] for a in (await agents(q="front desk"))["rows"]] == ["obs-clerk"]
        second = await agents(page="1", size="1")
        assert (second["total"], [a["agent_id"] for a in second["rows"]]) == (2, ["obs-courier"])
        bad = await client.get("/observe/api/agents", params={"status": "asleep"},
                               headers=bearer(token))
        assert bad.status_code == 400

    on_gateway(scenario, tmp_path)


def test_dead_letters_are_listed_with_their_reasons_poison_included(tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient, token: str) -> None:
        await fake.registry().dead_letter([
            DeadLetter("m1", "request", "driver:x", "obs-clerk", None, "poison",
                       "killed its handler's process twice", 1.0, kills=2),
            DeadLetter("m2", "notification", "driver:x", "ghost", None, "agent_not_found",
                       "no agent 'ghost'", 2.0)])
        letters = (await client.get("/observe/api/letters", headers=bearer(token))).json()
        assert [(d["code"], d["kills"]) for d in letters["letters"]] == [
            ("poison", 2), ("agent_not_found", 0)]
        shot = (await client.get("/observe/api/snapshot", headers=bearer(token))).json()
        assert shot["letters"]["total"] == 2
        assert shot["cluster"]["dead_letters"] == 2

    on_gateway(scenario, tmp_path)


def test_a2a_tasks_of_every_caller_are_shown_with_their_state_caller_and_trace(
        tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient, token: str) -> None:
        guard = fake.guard()
        assert guard is not None
        for n, caller in enumerate(("partner", "auditor")):
            body = {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": {
                "messageId": f"m-{n}", "role": "ROLE_USER", "parts": [{"data": {"n": n}}]}}}
            reply = await client.post("/agents/obs-clerk", json=body, headers={
                "A2A-Version": "1.0", **bearer(token_for(guard.keyring, caller))})
            assert reply.status_code == 200, reply.text
            assert reply.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        shot = (await client.get("/observe/api/snapshot", headers=bearer(token))).json()
        tasks = shot["tasks"]
        assert tasks["available"] is True
        assert tasks["states"] == {"completed": 2}
        rows = tasks["recent"]
        assert {r["owner"].rpartition(":")[2] for r in rows} == {"partner", "auditor"}
        for row in rows:
            assert row["target"] == "obs-clerk"
            assert row["trace_id"] == row["task_id"]  # the task's ID is its trace's
            assert row["updated"] is not None

    on_gateway(scenario, tmp_path)


def test_the_gateways_observer_reads_the_clusters_trace_store(tmp_path: Path) -> None:
    async def scenario(fake: FakeCluster, client: httpx.AsyncClient, token: str) -> None:
        empty = await client.get("/observe/api/traces", headers=bearer(token))
        assert empty.json() == {"available": True, "traces": []}
        await fake.trace_store().add_spans(request_spans("ef" * 16))

        async def listed() -> Any:
            reply = await client.get("/observe/api/traces", headers=bearer(token))
            return reply.json()["traces"]

        (trace,) = await eventually(listed)
        assert trace["trace_id"] == "ef" * 16
        fall = (await client.get(f"/observe/api/traces/{'ef' * 16}",
                                 headers=bearer(token))).json()
        assert [r["agent"] for r in fall["rows"]] == ["router-1", "logistics-1", "logistics-1"]

    on_gateway(scenario, tmp_path)


class ListStore(TraceStorePort):
    """A trace store made of a list (the real one is the cluster's; this stands in for it)."""

    def __init__(self, spans: Sequence[SpanRecord]) -> None:
        self.spans = list(spans)

    async def add_spans(self, spans: Sequence[SpanRecord]) -> None:
        self.spans.extend(spans)

    async def trace(self, trace_id: str) -> list[SpanRecord]:
        return sorted((s for s in self.spans if s.trace_id == trace_id),
                      key=lambda s: s.start_ns)

    async def find_traces(self, *, agent: str | None = None, capability: str | None = None,
                          task_id: str | None = None, status: SpanStatus | None = None,
                          since_ns: int | None = None, until_ns: int | None = None,
                          slowest: bool = False, limit: int = 50) -> list[TraceSummary]:
        ids = sorted({s.trace_id for s in self.spans
                      if agent in (None, s.attributes.get(Attr.AGENT_ID))})
        found = []
        for trace_id in ids:
            spans = await self.trace(trace_id)
            found.append(TraceSummary(trace_id, spans[0].name, spans[0].start_ns,
                                      (max(s.end_ns for s in spans) - spans[0].start_ns) / 1e6,
                                      len(spans), 0, ("logistics-1", "router-1")))
        return found[:limit]

    async def edges(self, since_ns: int) -> list[TraceEdge]:
        return [TraceEdge("router-1", "logistics-1", 6, 1, 0.1)]

    async def trace_stats(self) -> TraceStoreStats:
        return TraceStoreStats(len(self.spans), 1, 1000, 1 << 20, len(self.spans), 0)


def request_spans(trace_id: str) -> list[SpanRecord]:
    base = 1_700_000_000_000_000_000
    ms = 1_000_000
    return [
        SpanRecord(trace_id, "a" * 16, None, "handle cs.question@1.0", SpanKind.SERVER, base,
                   base + 9 * ms, attributes={Attr.AGENT_ID: "router-1", Attr.QUEUED_MS: 0.4}),
        SpanRecord(trace_id, "b" * 16, "a" * 16, "send logistics.track", SpanKind.CLIENT,
                   base + ms, base + 8 * ms, attributes={Attr.AGENT_ID: "logistics-1"}),
        SpanRecord(trace_id, "c" * 16, "b" * 16, "handle cs.question@1.0", SpanKind.SERVER,
                   base + 2 * ms, base + 7 * ms,
                   attributes={Attr.AGENT_ID: "logistics-1", Attr.HOST: "reach.pool.cs.0",
                               Attr.QUEUED_MS: 0.6}),
    ]


def on_store(scenario: Callable[[httpx.AsyncClient], Awaitable[None]]) -> None:
    async def main(fake: FakeCluster) -> None:
        store = ListStore(request_spans("ab" * 16))
        sampler = Sampler(fake, traces=lambda: store)
        app = Starlette(routes=ObserverRoutes(sampler).routes())
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app),
                                     base_url="http://gw") as client:
            await scenario(client)
        await sampler.close()

    run(main)


def test_a_request_through_the_router_is_a_waterfall_of_both_handler_spans() -> None:
    async def scenario(client: httpx.AsyncClient) -> None:
        listed = (await client.get("/observe/api/traces", params={"agent": "router-1"})).json()
        assert [t["trace_id"] for t in listed["traces"]] == ["ab" * 16]
        fall = (await client.get(f"/observe/api/traces/{'ab' * 16}")).json()
        rows = [(r["name"], r["agent"], r["depth"]) for r in fall["rows"]]
        assert rows == [("handle cs.question@1.0", "router-1", 0),
                        ("send logistics.track", "logistics-1", 1),
                        ("handle cs.question@1.0", "logistics-1", 2)]
        assert fall["rows"][2]["queued_ms"] == 0.6
        assert fall["rows"][2]["host"] == "reach.pool.cs.0"
        missing = await client.get(f"/observe/api/traces/{'cd' * 16}")
        assert missing.status_code == 404
        assert (await client.get("/observe/api/traces/not-hex")).status_code == 400
        shot = (await client.get("/observe/api/snapshot")).json()
        assert shot["graph"]["edges"] == [{"source": "router-1", "target": "logistics-1",
                                           "count": 6, "errors": 1, "per_s": 0.1}]
        assert shot["traces"]["spans"] == 3

    on_store(scenario)
