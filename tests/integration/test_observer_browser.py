"""The observer as a user sees it: its page, served by the gateway on a real Ray, in a real
headless Chromium (Debian's, driven by Playwright), with the customer-service agents under
supervision.

One browser for the module; every page is opened with the token in its ``#token=`` fragment
(the page keeps it and drops it from the address) except where a bad token is the point. With
``REACH_OBSERVER_SHOTS`` set, the last test writes a screenshot of each page under
``docs/observer/`` (the ones the README shows).
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from browser_tools import CHROMIUM, FLAGS, needs_chromium
from ray_helpers import kill_and_wait, start_gateway, traced, wait_until

from reach import ChildSpec, Dedicated, Intensity, Packed, SupervisorSpec
from reach.spans import Attr, SpanEvent, SpanKind, SpanRecord, SpanStatus
from reach.tools.customer_service import LogisticsAgent, OrderAgent, RefundAgent, RouterAgent
from reach.web.auth import token_for

pytestmark = [pytest.mark.integration, needs_chromium]

NAME = "obs-gateway"
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "observer"
#: How long a page may take to show what the cluster did (a restart, a look a second).
SEEN_MS = 30_000


@dataclass
class Observed:
    """The gateway's observer URL, a valid token, and the supervision tree under it."""

    url: str
    token: str
    supervisor: Any
    driver: Any  # a runtime whose processes trace


@pytest.fixture(scope="module")
async def observed(rt: Any) -> AsyncIterator[Observed]:
    pool = Packed(pool="obs-cs", size=1)
    async with traced(rt, "obs-driver") as driver:  # the agents' processes trace
        sup = await driver.supervise(SupervisorSpec("obs-cs", intensity=Intensity(10, 5),
                                                    children=[
            ChildSpec(RouterAgent, "obs-router", placement=Dedicated()),
            ChildSpec(OrderAgent, "obs-order-1", placement=pool),
            ChildSpec(LogisticsAgent, "obs-logistics-1", placement=pool),
            ChildSpec(RefundAgent, "obs-refund-1", placement=pool)]))
        url = start_gateway(rt, name=NAME)
        try:
            yield Observed(url, token_for(rt.cluster.guard().keyring, "observer"), sup, driver)
        finally:
            rt.stop_gateway(NAME)
            await sup.stop()


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as driver:
        chromium = await driver.chromium.launch(executable_path=CHROMIUM, args=list(FLAGS))
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture
async def page(browser: Any) -> AsyncIterator[Any]:
    context = await browser.new_context(viewport={"width": 1360, "height": 860})
    try:
        yield await context.new_page()
    finally:
        await context.close()


async def open_view(page: Any, observed: Observed, view: str) -> None:
    """Opens the page signed in, then one view by its tab, once the stream is live."""
    from playwright.async_api import expect

    await page.goto(f"{observed.url}/observe#token={observed.token}")
    await expect(page.locator("#live")).to_have_text("live", timeout=SEEN_MS)
    await page.click(f'#tabs a[data-view="{view}"]')
    await expect(page.locator(f"#view-{view}")).to_be_visible()


async def test_a_bad_token_is_refused_and_the_right_one_signs_in(
        observed: Observed, page: Any) -> None:
    from playwright.async_api import expect

    await page.goto(f"{observed.url}/observe#token=obs-watcher.{'0' * 64}")
    await expect(page.locator("#login-error")).to_contain_text("refused")
    await expect(page.locator("#view-cluster")).to_be_hidden()
    assert "token=" not in page.url  # the page dropped it from the address at once
    await page.fill("#token", observed.token)
    await page.click("#login-form button")
    await expect(page.locator("#live")).to_have_text("live", timeout=SEEN_MS)
    await expect(page.locator("#cluster-cards")).to_contain_text("agents")


# Before the restart below: the router's restart may take a warm spare another (untraced)
# driver of the session started, whose process does not trace.
async def test_a_real_question_through_the_router_is_one_waterfall_of_both_handlers(
        rt: Any, observed: Observed, page: Any) -> None:
    from playwright.async_api import expect

    from reach.tools.customer_service import Answer, Question

    reply = await observed.driver.client.request("obs-router", Question(customer="obs", text=(
        "Where is my parcel C-4096?")), returns=Answer)
    trace_id = reply.envelope.trace_id
    store = rt.cluster.trace_store()

    async def both_handled() -> bool:  # the hosts' spans reach the store in their batches
        handled = {s.attributes.get(Attr.AGENT_ID) for s in await store.trace(trace_id)
                   if s.kind is SpanKind.SERVER}
        return {"obs-router", "obs-logistics-1"} <= handled

    try:
        await wait_until(both_handled, timeout_s=60)
    except pytest.fail.Exception:
        spans = await store.trace(trace_id)
        pytest.fail(f"the store holds {[(s.name, s.process, s.kind.value) for s in spans]} "
                    f"of trace {trace_id}")
    await page.goto(f"{observed.url}/observe#token={observed.token}")
    await expect(page.locator("#live")).to_have_text("live", timeout=SEEN_MS)
    await page.evaluate(f"location.hash = '#trace/{trace_id}'")
    servers = page.locator('.wf-row[data-kind="server"]')
    await expect(servers.filter(has_text="obs-router")).to_have_count(1, timeout=SEEN_MS)
    await expect(servers.filter(has_text="obs-logistics-1")).to_have_count(1)


async def test_the_tree_shows_each_child_and_a_restart_flashes_where_it_happened(
        rt: Any, observed: Observed, page: Any) -> None:
    from playwright.async_api import expect

    await open_view(page, observed, "trees")
    await expect(page.locator('[data-supervisor="obs-cs"]')).to_contain_text("one_for_one")
    router = page.locator('[data-child="obs-router"]')
    for child in ("obs-router", "obs-order-1", "obs-logistics-1", "obs-refund-1"):
        await expect(page.locator(f'[data-child="{child}"] .status')).to_have_text(
            "online", timeout=SEEN_MS)
    await expect(router.locator("[data-restarts]")).to_have_text("↻ 0")

    record = await rt.cluster.registry().lookup("obs-router")
    await kill_and_wait(rt.cluster.host(record.host))
    await expect(router).to_have_class(re.compile(r"\bflash\b"), timeout=SEEN_MS)
    await expect(router.locator("[data-restarts]")).to_have_text("↻ 1", timeout=SEEN_MS)
    await expect(router.locator(".reason")).to_contain_text("last exit")
    await expect(router.locator(".status")).to_have_text("online", timeout=SEEN_MS)
    # The others did not restart, and do not flash.
    await expect(page.locator('[data-child="obs-order-1"]')).not_to_have_class(
        re.compile(r"\bflash\b"))


async def test_the_agents_table_is_searched_by_capability_and_by_description(
        observed: Observed, page: Any) -> None:
    from playwright.async_api import expect

    await open_view(page, observed, "agents")
    rows = page.locator("#agents tbody tr")
    await page.fill("#agent-q", "obs-")
    await expect(rows).to_have_count(4)
    await page.fill("#agent-capability", "logistics.track")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-agent", "obs-logistics-1")
    await expect(rows.first).to_contain_text("logistics.track (0)")
    await page.fill("#agent-capability", "")
    await page.fill("#agent-q", "obs- refunds")  # a word of the refund agent's description
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-agent", "obs-refund-1")
    await expect(page.locator("#by-capability")).to_contain_text("cs.route")


def request_spans(trace_id: str) -> list[SpanRecord]:
    """The spans of one question through the router to logistics, as the runtime records them:
    the driver's send, the router's handler, its send by capability, logistics' handler (a
    retry's event on it)."""
    now = time.time_ns()
    ms = 1_000_000

    def one(span_id: str, parent: str | None, start: float, end: float, name: str, *,
            kind: SpanKind, attributes: dict[str, str | int | float]) -> SpanRecord:
        return SpanRecord(trace_id, span_id, parent, name, kind, now + int(start * ms),
                          now + int(end * ms), SpanStatus.OK, "", "obs-test", attributes)

    ids = [secrets.token_hex(8) for _ in range(4)]
    spans = [
        one(ids[0], None, 0, 14, "send cs.route", kind=SpanKind.CLIENT,
            attributes={Attr.SENDER: "driver:obs", Attr.AGENT_ID: "obs-router"}),
        one(ids[1], ids[0], 1.5, 13, "handle cs.question@1.0", kind=SpanKind.SERVER,
            attributes={Attr.SENDER: "driver:obs", Attr.AGENT_ID: "obs-router",
                        Attr.HOST: "reach.host.r",
                        Attr.CAPABILITY: "cs.route", Attr.QUEUED_MS: 0.8}),
        one(ids[2], ids[1], 2.5, 12, "send logistics.track", kind=SpanKind.CLIENT,
            attributes={Attr.SENDER: "obs-router", Attr.AGENT_ID: "obs-logistics-1"}),
        one(ids[3], ids[2], 4, 11, "handle cs.question@1.0", kind=SpanKind.SERVER,
            attributes={Attr.SENDER: "obs-router", Attr.AGENT_ID: "obs-logistics-1",
                        Attr.HOST: "reach.pool.obs-cs.0", Attr.CAPABILITY: "logistics.track",
                        Attr.QUEUED_MS: 1.2}),
    ]
    retry = SpanEvent("retry", now + 5 * ms, {Attr.ATTEMPT: 2, Attr.REASON: "host died"})
    last = spans[3]
    spans[3] = SpanRecord(last.trace_id, last.span_id, last.parent_span_id, last.name,
                          last.kind, last.start_ns, last.end_ns, last.status,
                          last.status_message, last.process, last.attributes, (retry,))
    return spans


async def test_a_requests_waterfall_shows_router_then_logistics_and_the_graph_their_edge(
        rt: Any, observed: Observed, page: Any) -> None:
    from playwright.async_api import expect

    trace_id = secrets.token_hex(16)
    store = rt.cluster.trace_store()
    await store.add_spans(request_spans(trace_id))
    await wait_until(lambda: store.trace(trace_id))

    await open_view(page, observed, "traces")
    await page.fill("#trace-agent", "obs-logistics-1")
    row = page.locator(f'#traces tr[data-trace="{trace_id}"]')
    await expect(row).to_be_visible(timeout=SEEN_MS)
    await row.click()
    await expect(page.locator("#view-trace")).to_be_visible()
    servers = page.locator('.wf-row[data-kind="server"]')
    await expect(servers).to_have_count(2)
    await expect(servers.nth(0)).to_have_attribute("data-agent", "obs-router")
    await expect(servers.nth(1)).to_have_attribute("data-agent", "obs-logistics-1")
    await expect(servers.nth(1)).to_contain_text("reach.pool.obs-cs.0")
    await expect(servers.nth(1)).to_contain_text("queued 1.20")
    await expect(page.locator(".wf-events")).to_contain_text("retry")

    await page.click('#tabs a[data-view="graph"]')
    edge = page.locator('#graph [data-edge="obs-router -> obs-logistics-1"]')
    await expect(edge).to_have_count(1, timeout=SEEN_MS)
    await expect(page.locator("#edges")).to_contain_text("obs-logistics-1")


async def test_an_a2a_callers_task_is_listed_with_its_state_and_the_caller(
        rt: Any, observed: Observed, page: Any) -> None:
    import httpx
    from playwright.async_api import expect

    partner = token_for(rt.cluster.guard().keyring, "obs-partner")
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": secrets.token_hex(8), "role": "ROLE_USER",
        "parts": [{"data": {"customer": "obs", "text": "Where is my parcel C-77?"}}]}}}
    async with httpx.AsyncClient(timeout=30) as client:
        reply = await client.post(f"{observed.url}/agents/obs-router", json=body, headers={
            "A2A-Version": "1.0", "Authorization": f"Bearer {partner}"})
    assert reply.status_code == 200, reply.text
    task = reply.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    await open_view(page, observed, "tasks")
    row = page.locator(f'#tasks tr[data-task="{task["id"]}"]')
    await expect(row).to_have_count(1, timeout=SEEN_MS)
    await expect(row).to_contain_text("completed")
    await expect(row).to_contain_text("obs-partner")
    await expect(row).to_contain_text("obs-router")


@pytest.mark.skipif(not os.environ.get("REACH_OBSERVER_SHOTS"),
                    reason="writes the README's screenshots: set REACH_OBSERVER_SHOTS=1")
async def test_screenshots_of_each_page(observed: Observed, page: Any) -> None:
    from playwright.async_api import expect

    SHOTS.mkdir(parents=True, exist_ok=True)
    await open_view(page, observed, "cluster")
    for view in ("cluster", "trees", "agents", "graph", "traces", "letters", "tasks"):
        await page.click(f'#tabs a[data-view="{view}"]')
        await expect(page.locator(f"#view-{view}")).to_be_visible()
        if view == "agents":
            await page.fill("#agent-q", "obs-")
            await expect(page.locator("#agents tbody tr")).to_have_count(4)
        if view == "traces":
            await expect(page.locator("#traces tbody tr").first).to_be_visible(timeout=SEEN_MS)
        await page.wait_for_timeout(300)  # let the SVG and tables settle for the picture
        await page.screenshot(path=str(SHOTS / f"{view}.png"), full_page=True)
        if view == "traces":
            await page.locator("#traces tbody tr").first.click()
            await expect(page.locator(".wf-row").first).to_be_visible()
            await page.screenshot(path=str(SHOTS / "trace.png"), full_page=True)
