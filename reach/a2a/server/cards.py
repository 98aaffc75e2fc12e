"""Agent cards (A2A 1.0) made from what reach knows of its agents. Pure: no I/O.

Where the gateway serves them (``base`` is :attr:`GatewayOptions.base_url`):

- ``GET /agents/{agent_id}/.well-known/agent-card.json``: one agent's card, whose JSON-RPC
  endpoint is ``POST /agents/{agent_id}``;
- ``GET /.well-known/agent-card.json``: the gateway's own card, a router whose endpoint is
  ``POST /``: it sends each message to the least-loaded online holder of the capability the
  message names in its metadata (``{"capability": "order.query"}``).

An agent's capabilities are its skills (``id`` and ``name`` the tag, ``tags`` the tag and its
parents, ``description`` the agent's own); the router's skills are every capability held by an
agent. Input modes are ``application/json`` (data parts, for a handler of a schema) and
``text/plain`` (text parts, for a handler of :class:`reach.Text`); ``capabilities.streaming`` is
true where a handler streams. The handlers' schemas (JSON Schema of what each reads) travel in
the card as the extension :data:`SCHEMAS_EXTENSION`, so that a client knows what data to send.
With auth on, the card declares the bearer scheme (the cards themselves stay public).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_1_0, TransportProtocol

from reach.a2a.server.catalog import AgentView, HandlerInfo
from reach.agent import reads_text
from reach.web.auth import SCHEME_NAME

#: Media type of data parts (a payload of a schema).
JSON_MODE = "application/json"
#: Media type of text parts.
TEXT_MODE = "text/plain"
#: URI of the card extension listing an agent's handlers and their JSON schemas.
SCHEMAS_EXTENSION = "urn:reach:a2a:schemas:1.0"
#: Message metadata key that names the capability a message to the router is for.
CAPABILITY_KEY = "capability"
#: Message (or data part) metadata key that names the payload's schema.
SCHEMA_KEY = "schema"
#: Path prefix of the agents' endpoints.
AGENTS_PREFIX = "/agents/"


def agent_path(agent_id: str) -> str:
    """The path of an agent's JSON-RPC endpoint (its card is under it, at the well-known
    path)."""
    return AGENTS_PREFIX + quote(agent_id, safe="")


def card_path(agent_id: str | None) -> str:
    """The path of an agent's card, or of the router's (``None``)."""
    return AGENT_CARD_WELL_KNOWN_PATH if agent_id is None else (
        agent_path(agent_id) + AGENT_CARD_WELL_KNOWN_PATH)


def _security(auth: bool) -> dict[str, Any]:
    if not auth:
        return {}
    scheme = SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
        scheme="bearer", bearer_format="reach-a2a",
        description="A token from the deployment's keyring (`reach token NAME`); the call "
                    "enters reach as the principal a2a:NAME"))
    return {"security_schemes": {SCHEME_NAME: scheme},
            "security_requirements": [SecurityRequirement(
                schemes={SCHEME_NAME: StringList(list=[])})]}


def _tags(capability: str) -> list[str]:
    parts = capability.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _modes(handlers: Sequence[HandlerInfo]) -> tuple[list[str], list[str]]:
    inputs = [m for m, on in ((JSON_MODE, any(not h.reads_text for h in handlers) or not handlers),
                              (TEXT_MODE, any(h.reads_text for h in handlers))) if on]
    text_out = any(h.returns is not None and reads_text(h.returns) for h in handlers)
    return inputs, [JSON_MODE, TEXT_MODE] if text_out else [JSON_MODE]


def _extension(handlers: Sequence[HandlerInfo]) -> list[AgentExtension]:
    if not handlers:
        return []
    docs = [{"schema": h.schema, "returns": h.returns, "streaming": h.streaming,
             "reads_text": h.reads_text, "json_schema": h.json_schema} for h in handlers]
    return [AgentExtension(uri=SCHEMAS_EXTENSION, required=False, params={"handlers": docs},
                           description="What each handler reads (name a schema in the "
                                       "message metadata, {\"schema\": ...}, when several do)")]


def _interface(url: str) -> AgentInterface:
    return AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC.value,
                          protocol_version=PROTOCOL_VERSION_1_0)


def agent_card(view: AgentView, base_url: str, *, auth: bool, version: str) -> AgentCard:
    """One agent's card.

    Args:
        view: The agent and its handlers.
        base_url: Where the gateway answers (no trailing slash).
        auth: The gateway requires bearer tokens.
        version: The version the card states (reach's).
    """
    record = view.record
    description = record.description or f"The reach agent {record.agent_id}."
    skills = [AgentSkill(id=c, name=c, description=description, tags=_tags(c))
              for c in record.capabilities] or [
        AgentSkill(id=record.agent_id, name=record.agent_id, description=description,
                   tags=[record.agent_id])]
    inputs, outputs = _modes(view.handlers)
    return AgentCard(
        name=record.agent_id, description=description, version=version,
        supported_interfaces=[_interface(base_url + agent_path(record.agent_id))],
        capabilities=AgentCapabilities(streaming=view.streaming, push_notifications=False,
                                       extensions=_extension(view.handlers)),
        default_input_modes=inputs, default_output_modes=outputs, skills=skills,
        **_security(auth))


def router_card(views: Sequence[AgentView], base_url: str, *, name: str, auth: bool,
                version: str) -> AgentCard:
    """The gateway's own card: a router to every capability held by an agent.

    Args:
        views: The agents.
        base_url: Where the gateway answers (no trailing slash).
        name: The gateway's name.
        auth: The gateway requires bearer tokens.
        version: The version the card states (reach's).
    """
    holders: dict[str, list[AgentView]] = {}
    for view in views:
        for capability in view.record.capabilities:
            holders.setdefault(capability, []).append(view)
    skills = [AgentSkill(
        id=c, name=c, tags=_tags(c),
        description=" | ".join(f"{v.agent_id}: {v.record.description or 'a reach agent'}"
                               for v in hs))
        for c, hs in sorted(holders.items())] or [AgentSkill(
        id="route", name="route", tags=["route"],
        description="Routes messages by capability; no agent holds one yet")]
    handlers = [h for v in views for h in v.handlers]
    inputs, outputs = _modes(handlers)
    return AgentCard(
        name=name, version=version,
        description=("reach's A2A router: each message goes to the least-loaded online agent "
                     f"holding the capability named in its metadata, "
                     f"{{\"{CAPABILITY_KEY}\": \"<skill id>\"}}. Each agent also has a card "
                     f"of its own at {AGENTS_PREFIX}<agent id>{AGENT_CARD_WELL_KNOWN_PATH}."),
        supported_interfaces=[_interface(base_url + "/")],
        capabilities=AgentCapabilities(streaming=any(v.streaming for v in views),
                                       push_notifications=False),
        default_input_modes=inputs, default_output_modes=outputs, skills=skills,
        **_security(auth))


__all__ = ["AGENTS_PREFIX", "CAPABILITY_KEY", "JSON_MODE", "SCHEMAS_EXTENSION", "SCHEMA_KEY",
           "TEXT_MODE", "agent_card", "agent_path", "card_path", "router_card"]
