"""The A2A gateway on a real Ray against replies JSON cannot carry: an in-cluster agent that
answers NaN ends its task FAILED with a reach error saying why, and the gateway goes on
answering for that task (GetTask, ListTasks with artifacts) and for new ones."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from hostile_gateway_agents import GwhMeter
from ray_helpers import start_gateway

import reach
from reach.web.auth import token_for

pytestmark = pytest.mark.integration

NAME = "gw-hostile"
AGENT = "gwh-meter"


def rpc(method: str, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}


def ask(value: str) -> dict[str, Any]:
    return rpc("SendMessage", message={"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                                       "parts": [{"data": {"value": value}}]})


async def test_a_nan_reply_fails_its_task_which_stays_readable_with_the_gateway_up(
        rt: Any) -> None:
    await rt.spawn(GwhMeter, AGENT, placement=reach.Packed(pool="gwh", size=1))
    url = start_gateway(rt, name=NAME)
    headers = {"A2A-Version": "1.0",
               "Authorization": f"Bearer {token_for(rt.cluster.guard().keyring, 'prober')}"}
    endpoint = f"{url}/agents/{AGENT}"
    try:
        async with httpx.AsyncClient(timeout=30.0, headers=headers) as http:

            async def call(body: dict[str, Any]) -> dict[str, Any]:
                reply = await http.post(endpoint, json=body)
                assert reply.status_code == 200, reply.text
                answer: dict[str, Any] = reply.json()
                assert "error" not in answer, answer
                return answer

            task = (await call(ask("nan")))["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_FAILED"
            error = task["metadata"]["reach"]["error"]
            assert (error["code"], error["details"]["path"]) == ("codec_error", "$.value")
            assert "not JSON" in task["status"]["message"]["parts"][0]["text"]

            got = (await call(rpc("GetTask", id=task["id"])))["result"]
            assert got["status"]["state"] == "TASK_STATE_FAILED"
            listed = (await call(rpc("ListTasks", includeArtifacts=True)))["result"]
            assert task["id"] in [t["id"] for t in listed["tasks"]]

            fine = (await call(ask("1.5")))["result"]["task"]
            assert fine["status"]["state"] == "TASK_STATE_COMPLETED"
            assert fine["artifacts"][0]["parts"][0]["data"] == {"value": 1.5}
            listed = (await call(rpc("ListTasks", includeArtifacts=True)))["result"]
            assert {task["id"], fine["id"]} <= {t["id"] for t in listed["tasks"]}
    finally:
        rt.stop_gateway(NAME)
        await rt.stop(AGENT)
