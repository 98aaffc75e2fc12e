"""Agent cards and bearer tokens of the A2A gateway: pure mappings, no cluster."""

from __future__ import annotations

from typing import Any

import pytest
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.utils.proto_utils import validate_proto_required_fields

from reach.a2a.server.cards import (
    SCHEMAS_EXTENSION,
    agent_card,
    agent_path,
    card_path,
    router_card,
)
from reach.a2a.server.catalog import AgentView, HandlerInfo
from reach.errors import ConfigError
from reach.records import AgentRecord
from reach.security.keys import Keyring
from reach.web.auth import SCHEME_NAME, bearer_token, principal_for, token_for

ORDER = HandlerInfo("shop.order@1.2", "shop.status@1.0", json_schema={
    "type": "object", "properties": {"order_id": {"type": "integer"}}, "required": ["order_id"]})
CHAT = HandlerInfo("reach.text@1.0", "reach.text@1.0", reads_text=True)
STORY = HandlerInfo("reach.text@1.0", "reach.text@1.0", streaming=True, reads_text=True)


def view(agent_id: str, *handlers: HandlerInfo, caps: tuple[str, ...] = ("order.query",),
         description: str = "Looks up orders. Needs an order ID.") -> AgentView:
    return AgentView(AgentRecord(agent_id, caps, description, "host-1", "node-a", epoch=3),
                     handlers)


def test_an_agents_card_has_its_capabilities_as_skills_and_its_own_endpoint() -> None:
    card = agent_card(view("orders-1", ORDER), "http://gw:8000", auth=False, version="0.2.0")
    validate_proto_required_fields(card)
    assert card.name == "orders-1"
    assert card.description == "Looks up orders. Needs an order ID."
    (interface,) = card.supported_interfaces
    assert (interface.url, interface.protocol_binding, interface.protocol_version) == (
        "http://gw:8000/agents/orders-1", "JSONRPC", "1.0")
    (skill,) = card.skills
    assert (skill.id, skill.name, list(skill.tags)) == ("order.query", "order.query",
                                                         ["order", "order.query"])
    assert skill.description == card.description
    assert not card.capabilities.streaming
    assert list(card.default_input_modes) == ["application/json"]
    assert list(card.default_output_modes) == ["application/json"]
    assert not card.security_schemes


def test_a_card_says_streaming_and_text_where_a_handler_streams_or_reads_text() -> None:
    card = agent_card(view("teller", STORY, ORDER), "http://gw", auth=False, version="1")
    assert card.capabilities.streaming
    assert list(card.default_input_modes) == ["application/json", "text/plain"]
    assert list(card.default_output_modes) == ["application/json", "text/plain"]
    text_only = agent_card(view("chat", CHAT), "http://gw", auth=False, version="1")
    assert list(text_only.default_input_modes) == ["text/plain"]
    assert not text_only.capabilities.streaming


def test_a_card_lists_the_handlers_schemas_in_an_extension() -> None:
    card = agent_card(view("orders-1", ORDER, CHAT), "http://gw", auth=False, version="1")
    (extension,) = card.capabilities.extensions
    assert extension.uri == SCHEMAS_EXTENSION
    handlers = agent_card_to_dict(card)["capabilities"]["extensions"][0]["params"]["handlers"]
    assert [h["schema"] for h in handlers] == ["shop.order@1.2", "reach.text@1.0"]
    assert handlers[0]["json_schema"]["required"] == ["order_id"]
    assert handlers[1]["reads_text"] is True


def test_with_auth_a_card_declares_the_bearer_scheme() -> None:
    card = agent_card(view("orders-1", ORDER), "http://gw", auth=True, version="1")
    scheme = card.security_schemes[SCHEME_NAME].http_auth_security_scheme
    assert scheme.scheme == "bearer"
    (requirement,) = card.security_requirements
    assert SCHEME_NAME in requirement.schemes


def test_an_agent_without_capabilities_or_description_still_has_a_skill() -> None:
    card = agent_card(view("lonely", ORDER, caps=(), description=""), "http://gw",
                      auth=False, version="1")
    validate_proto_required_fields(card)
    assert [s.id for s in card.skills] == ["lonely"]
    assert "lonely" in card.description


def test_the_router_card_has_every_capability_once_and_routes_at_the_root() -> None:
    views = [view("orders-1", ORDER), view("orders-2", ORDER),
             view("teller", STORY, caps=("story.tell", "order.query"), description="Tells.")]
    card = router_card(views, "http://gw", name="reach-gateway", auth=True, version="1")
    validate_proto_required_fields(card)
    assert card.name == "reach-gateway"
    assert card.supported_interfaces[0].url == "http://gw/"
    assert [s.id for s in card.skills] == ["order.query", "story.tell"]
    assert "orders-2" in card.skills[0].description
    assert '"capability"' in card.description
    assert card.capabilities.streaming
    assert SCHEME_NAME in card.security_schemes


def test_the_router_card_of_an_empty_cluster_is_still_complete() -> None:
    card = router_card([], "http://gw", name="gw", auth=False, version="1")
    validate_proto_required_fields(card)
    assert not card.capabilities.streaming


def test_paths_quote_agent_ids() -> None:
    assert agent_path("a b") == "/agents/a%20b"
    assert card_path(None) == "/.well-known/agent-card.json"
    assert card_path("x") == "/agents/x/.well-known/agent-card.json"


@pytest.fixture
def ring() -> Keyring:
    return Keyring.generate()


def test_a_token_proves_its_name_and_nothing_else(ring: Keyring) -> None:
    token = token_for(ring, "partner-7")
    name, _, mac = token.partition(".")
    assert name == "partner-7"
    assert len(mac) == 64
    assert principal_for(ring, token) == "a2a:partner-7"
    assert principal_for(ring, f"other.{mac}") is None
    assert principal_for(ring, token[:-1] + ("0" if token[-1] != "0" else "1")) is None
    assert principal_for(Keyring.generate(), token) is None


@pytest.mark.parametrize("token", ["", "nodot", ".abc", "a:b.00", "名前.00"])
def test_malformed_tokens_prove_nothing(ring: Keyring, token: str) -> None:
    assert principal_for(ring, token) is None


@pytest.mark.parametrize("name", ["", "a.b", "a:b", "x" * 65, "-lead"])
def test_a_token_name_must_be_plain(ring: Keyring, name: str) -> None:
    with pytest.raises(ConfigError, match="token name"):
        token_for(ring, name)


@pytest.mark.parametrize(("header", "expected"), [
    (None, None), ("", None), ("Basic abc", None), ("Bearer", None), ("Bearer   ", None),
    ("Bearer abc.def", "abc.def"), ("bearer  abc.def ", "abc.def"),
])
def test_the_bearer_token_of_an_authorization_header(header: Any, expected: Any) -> None:
    assert bearer_token(header) == expected
