"""Bearer tokens of the A2A gateway, derived from the deployment's keyring.

A token names its holder and proves it: ``<name>.<hex HMAC-SHA256(master key,
"reach-a2a-token:" + name)>``. Any process holding the keyring can check one (in constant time)
and nobody without it can make one, so the gateway's replicas need no token table; ``reach token
NAME`` prints a name's token. A call made with a valid token enters reach as the principal
``a2a:<name>``, which the ACL and the audit log see as a caller of its own.

Changing the keyring's master key revokes every token at once; a single name cannot be revoked
alone except by refusing its principal in the ACL (``{"callers": ["a2a:name"], "allow": false}``).
"""

from __future__ import annotations

import hashlib
import hmac
import re

from reach._runtime.names import GATEWAY_PREFIX
from reach.errors import ConfigError
from reach.security.keys import Keyring

#: What the HMAC of a token covers, before the name.
TOKEN_CONTEXT = b"reach-a2a-token:"
#: The security scheme's name in agent cards.
SCHEME_NAME = "reachBearer"
#: Principal of calls through a gateway that checks no tokens.
ANONYMOUS = f"{GATEWAY_PREFIX}anonymous"

# A name is what follows "a2a:" in principals, ACL rules and the audit log: keep it plain.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]{0,63}\Z")


def _mac(keyring: Keyring, name: str) -> str:
    return hmac.new(keyring.master, TOKEN_CONTEXT + name.encode("utf-8"),
                    hashlib.sha256).hexdigest()


def token_for(keyring: Keyring, name: str) -> str:
    """The bearer token of ``name`` under this keyring.

    Raises:
        ConfigError: ``name`` is not 1-64 letters, digits, ``_`` or ``-`` (starting with a
            letter or digit).
    """
    if not _NAME.match(name):
        raise ConfigError(f"a token name must be 1-64 letters, digits, '_' or '-', got {name!r}",
                          details={"setting": "token_name"})
    return f"{name}.{_mac(keyring, name)}"


def principal_for(keyring: Keyring, token: str) -> str | None:
    """The principal (``a2a:<name>``) a token proves, or None when it proves nothing."""
    name, dot, mac = token.partition(".")
    if not dot or not _NAME.match(name):
        return None
    if not hmac.compare_digest(mac.encode("ascii", "replace"), _mac(keyring, name).encode()):
        return None
    return f"{GATEWAY_PREFIX}{name}"


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


__all__ = ["ANONYMOUS", "SCHEME_NAME", "TOKEN_CONTEXT", "bearer_token", "principal_for",
           "token_for"]
