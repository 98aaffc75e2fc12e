"""A task's result carries the handler's model, as a reply does: the supervisor sends the payload
and its schema, and the handle reads them where the result arrives (on the fake cluster)."""

from __future__ import annotations

import pickle

import pytest
from pydantic import BaseModel

import reach
from policies.tasks import TaskState
from reach.errors import InvalidPayload, SchemaIncompatible, Severity, UnknownSchema
from reach.records import TaskResult
from reach.replies import read_task_result
from reach.testing import FakeCluster, run


@reach.schema("tr.order@1.0")
class Order(BaseModel):
    order_id: str
    fail: str = ""


@reach.schema("tr.status@1.0")
class Status(BaseModel):
    order_id: str
    status: str = "unknown"


@reach.schema("tr.other@1.0")
class Other(BaseModel):
    text: str = ""


class Shop(reach.Agent):
    """Answers an order's status; degrades with a partial one, or one that is not a status."""

    capabilities = ("tr.order",)

    @reach.handler(Order, returns=Status)
    async def status(self, ctx: reach.Context, m: Order) -> Status:
        if m.fail == "partial":
            raise reach.ReachError("the warehouse is down", severity=Severity.DEGRADABLE,
                                   partial={"order_id": m.order_id})
        if m.fail == "stranger":
            raise reach.ReachError("the warehouse is down", severity=Severity.DEGRADABLE,
                                   partial={"rows": 5})
        return Status(order_id=m.order_id, status="shipped")


def tree() -> reach.SupervisorSpec:
    return reach.SupervisorSpec("s", children=[reach.ChildSpec(Shop, "shop-1")])


def test_a_completed_tasks_value_is_the_handlers_model_typed_or_by_its_schema() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(tree())
        typed = await (await sup.submit("shop-1", Order(order_id="A-1"),
                                        returns=Status)).result()
        assert typed.state is TaskState.COMPLETED
        assert typed.value == Status(order_id="A-1", status="shipped")
        assert typed.schema == "tr.status@1.0"
        by_schema = await (await sup.submit("shop-1", Order(order_id="A-2"))).result()
        assert by_schema.value == Status(order_id="A-2", status="shipped")
        assert pickle.loads(pickle.dumps(typed)) == typed  # a read result still crosses

    run(scenario)


def test_the_supervisor_sends_the_payload_and_its_schema_as_plain_data() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(tree())
        handle = await sup.submit("shop-1", Order(order_id="A-3"))
        await handle.result()
        sent = await sup._port.wait_task(handle.task_id)
        assert sent.value == {"order_id": "A-3", "status": "shipped"}
        assert sent.schema == "tr.status@1.0"

    run(scenario)


def test_a_degraded_tasks_partial_result_is_read_as_the_model_asked_for() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(tree())
        typed = await (await sup.submit("shop-1", Order(order_id="B-1", fail="partial"),
                                        returns=Status)).result()
        assert (typed.state, typed.partial) == (TaskState.DEGRADED, True)
        assert typed.value == Status(order_id="B-1")
        untyped = await (await sup.submit("shop-1", Order(order_id="B-2", fail="partial"),
                                          )).result()
        assert untyped.value == {"order_id": "B-2"}  # a partial result declares no schema
        stranger = await sup.submit("shop-1", Order(order_id="B-3", fail="stranger"),
                                    returns=Status)
        with pytest.raises(InvalidPayload):
            await stranger.result()

    run(scenario)


def test_a_model_of_another_schema_than_the_replys_is_refused() -> None:
    async def scenario(fake: FakeCluster) -> None:
        rt = fake.runtime()
        sup = await rt.supervise(tree())
        handle = await sup.submit("shop-1", Order(order_id="C-1"), returns=Other)
        with pytest.raises(SchemaIncompatible):
            await handle.result()

        class Unregistered(BaseModel):
            text: str

        with pytest.raises(UnknownSchema):
            await sup.submit("shop-1", Order(order_id="C-2"), returns=Unregistered)

    run(scenario)


def test_a_result_without_a_value_or_read_already_is_left_as_it_is() -> None:
    failed = TaskResult("t-1", TaskState.FAILED)
    assert read_task_result(failed, Status) is failed
    read = TaskResult("t-2", TaskState.COMPLETED, Status(order_id="D-1"), schema="tr.status@1.0")
    assert read_task_result(read, Status) is read
    assert TaskResult("t-3", TaskState.RUNNING).schema == ""
