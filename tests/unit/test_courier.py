"""The runtime's one send path: envelopes built once and carried by a courier, on the fake cluster
(what sessions, tasks and the remote host send through)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

import reach
from reach._runtime.courier import Courier
from reach.errors import AgentNotFound, LoopDetected, UnknownSchema
from reach.protocol import Envelope
from reach.schemas import payload_body
from reach.testing import FakeCluster, eventually, run


@reach.schema("courier.note@1.0")
class Note(BaseModel):
    text: str


class Counter(reach.Agent):
    """Counts the runs of its effectively-once handler, and the notes it hears."""

    capabilities = ("courier.count",)

    def __init__(self) -> None:
        self.runs = 0
        self.heard: list[str] = []

    @reach.handler(Note, returns=Note, once=True)
    async def count(self, ctx: reach.Context, m: Note) -> Note:
        self.runs += 1
        return Note(text=f"{m.text}:{self.runs}")

    @reach.handler("courier.heard@1.0", returns=Note)
    async def heard_so_far(self, ctx: reach.Context, m: dict[str, object]) -> Note:
        return Note(text=",".join(self.heard))

    @reach.handler("courier.tell@1.0")
    async def tell(self, ctx: reach.Context, m: dict[str, object]) -> None:
        self.heard.append(str(m["text"]))

    @reach.handler("courier.chunks@1.0", returns=Note)
    async def chunks(self, ctx: reach.Context, m: dict[str, object]):  # type: ignore[no-untyped-def]
        for i in range(3):
            yield Note(text=str(i))


def test_a_request_built_once_and_carried_twice_runs_its_once_handler_once() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Counter, "c-1")
        courier = rt.client.courier
        env = courier.build_request("c-1", Note(text="pay"), msg_id="fixed-request")
        first, again = await courier.call(env), await courier.call(env)
        assert first.payload == again.payload == {"text": "pay:1"}
        assert first.request_id == again.request_id == "fixed-request"

    run(scenario)


def test_a_courier_inside_a_call_keeps_the_trace_extends_the_hops_and_refuses_a_loop() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        parent = Envelope.request("a-1", "b-1", Note(text="x"), trace_id="trace-1",
                                  hops=("a-1",), timeout_ms=1_000)
        courier = Courier(rt.link, "b-1", parent)
        child = courier.build_request("c-1", Note(text="y"), timeout_ms=60_000)
        assert (child.trace_id, child.hops) == ("trace-1", ("a-1", "b-1"))
        assert child.deadline is not None
        assert parent.deadline is not None
        assert child.deadline <= parent.deadline  # never outlives the call it serves
        with pytest.raises(LoopDetected):
            courier.build_notification("a-1", Note(text="back to the start"))

    run(scenario)


def test_a_built_notification_is_handed_over_and_one_for_nobody_is_refused() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Counter, "c-1")
        courier = rt.client.courier
        await courier.post(courier.build_notification("c-1", {"text": "hi"}, "courier.tell@1.0"))

        async def heard() -> bool:
            reply = await rt.client.request("c-1", {}, "courier.heard@1.0", returns=Note)
            return bool(reply.value.text == "hi")

        assert await eventually(heard)
        with pytest.raises(AgentNotFound):
            await courier.post(courier.build_notification("nobody-1", {"text": "hi"},
                                                          "courier.tell@1.0"))

    run(scenario)


def test_a_streamed_request_yields_its_chunks_and_ends() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        await rt.spawn(Counter, "c-1")
        courier = rt.client.courier
        env = courier.build_request("c-1", {}, "courier.chunks@1.0")
        chunks = [c.payload["text"] async for c in courier.stream(env)]
        assert chunks == ["0", "1", "2"]
        assert env.msg_id not in rt.transport.pending  # nothing left waiting for it

    run(scenario)


def test_a_payload_body_is_a_models_data_and_ref_or_a_copy_of_a_mapping() -> None:
    assert payload_body(Note(text="x")) == ({"text": "x"}, "courier.note@1.0")
    assert payload_body(Note(text="x"), "courier.note@1.1") == ({"text": "x"},
                                                                "courier.note@1.1")
    given = {"text": "y"}
    body, ref = payload_body(given, "courier.tell@1.0")
    assert (body, ref) == ({"text": "y"}, "courier.tell@1.0")
    assert body is not given
    assert payload_body(given) == ({"text": "y"}, "")

    class Unregistered(BaseModel):
        text: str

    with pytest.raises(UnknownSchema):
        payload_body(Unregistered(text="z"))
