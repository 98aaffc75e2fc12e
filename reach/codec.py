"""Envelopes to bytes and back: msgpack, strict UTF-8, one envelope or a batch per frame.

A frame is a msgpack array ``[WIRE_VERSION, kind, body]``: ``kind`` is 0 for one envelope (``body``
is its field array) and 1 for a batch (``body`` is an array of field arrays). An envelope's fields
travel as an array in :data:`FIELDS` order, which is both smaller and faster than a map. The last
two, its W3C trace context (``span_id``, ``trace_flags``), travel only when it has a span ID: an
envelope without one is the array of the first :data:`BASE_FIELDS`, as peers that know no trace
context send and read it.

With a guard (:class:`~reach.security.guard.Guard`, signing on), frames are *sealed*: ``kind`` is 2
and the body is an array of ``[sealed, timestamp, nonce, mac]``, where ``sealed`` is the msgpack of
the field array followed by the payload's key ID (nil when the payload is in clear), and the MAC is
HMAC-SHA256 by the envelope's sender over timestamp, nonce and ``sealed``. An encrypted payload
travels as ``[nonce, ciphertext]``, AES-GCM with the header fields (sender, receiver, type, msg_id,
schema, timestamp, key ID) as associated data. Decoding verifies each envelope before it is read
and decrypts its payload, so business code never sees ciphertext; a refused envelope is a
:class:`Refused` entry with an :class:`~reach.errors.AuthError`, the rest of the batch unharmed.

Strings are UTF-8 both ways with no replacement: a string that is not valid UTF-8 (or a Python
string holding a lone surrogate) is a :class:`~reach.errors.CodecError`. Extension types are
refused. Every failure of the underlying library is translated here, in :func:`_unpack`, and
nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgpack

from reach.errors import AuthError, CodecError, ProtocolError, ReachError
from reach.protocol import Envelope
from reach.security.keys import Signature, header_aad

if TYPE_CHECKING:
    from reach.security.guard import Guard

WIRE_VERSION = 1
_ONE, _BATCH, _SEALED = 0, 1, 2
_PAYLOAD, _SENDER = 4, 2

#: Default maximum frame size in bytes (a session may negotiate another).
DEFAULT_MAX_FRAME_BYTES = 4 * 1024 * 1024

#: Envelope fields in wire order. Appending a field needs a new WIRE_VERSION, unless it is
#: optional and may be left off (as the trace context is).
FIELDS: tuple[str, ...] = (
    "msg_id", "msg_type", "sender", "receiver", "payload", "payload_schema", "request_id",
    "timeout_ms", "deadline", "trace_id", "session_id", "hops", "error_info", "timestamp",
    "span_id", "trace_flags",
)
#: How many fields an envelope without trace context travels with.
BASE_FIELDS = 14
_SIZES = (BASE_FIELDS, len(FIELDS))


@dataclass(frozen=True)
class Refused:
    """An envelope of a batch that could not be accepted, and why.

    Attributes:
        index: Its position in the batch.
        error: The CodecError, ProtocolError or AuthError that refused it.
        msg_id: Its ``msg_id`` if that much could be read, so the sender can be told.
        sender: Its ``sender`` if that much could be read.
    """

    index: int
    error: ReachError
    msg_id: str | None
    sender: str | None


class Codec:
    """Encodes and decodes frames, refusing any larger than ``max_frame_bytes``.

    Args:
        max_frame_bytes: Largest frame accepted either way.
        guard: Signs, verifies, encrypts and decrypts (sealed frames); None: plain frames, and
            sealed ones are refused.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 guard: Guard | None = None) -> None:
        if max_frame_bytes <= 0:
            raise CodecError(f"max_frame_bytes must be positive, got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self.guard = guard

    def encode(self, envelope: Envelope) -> bytes:
        """Encodes one envelope as a frame.

        Raises:
            CodecError: a string is not encodable as UTF-8, a value has no msgpack form, or
                the frame is larger than ``max_frame_bytes``.
        """
        if self.guard is not None:
            return self._pack([WIRE_VERSION, _SEALED, [self._seal(envelope)]])
        return self._pack([WIRE_VERSION, _ONE, _fields(envelope)])

    def encode_batch(self, envelopes: Iterable[Envelope]) -> bytes:
        """Encodes several envelopes as one frame.

        Raises:
            CodecError: as for :meth:`encode`.
        """
        if self.guard is not None:
            return self._pack([WIRE_VERSION, _SEALED, [self._seal(e) for e in envelopes]])
        return self._pack([WIRE_VERSION, _BATCH, [_fields(e) for e in envelopes]])

    def decode(self, data: bytes) -> Envelope:
        """Decodes a frame holding exactly one envelope.

        Raises:
            CodecError: the bytes are not a valid single-envelope frame.
            ProtocolError: the envelope breaks a protocol rule.
        """
        kind, body = self._frame(data)
        if kind == _SEALED and len(body) == 1:
            return _envelope(self._open(body[0]))
        if kind != _ONE:
            raise CodecError(
                f"expected a frame with one envelope, got a batch of {len(body)}",
                details={"rule": "frame_kind"},
            )
        return _envelope(body)

    def decode_batch(self, data: bytes) -> list[Envelope]:
        """Decodes a frame (single or batch) into its envelopes, refusing it whole on any error.

        Raises:
            CodecError: the bytes are not a valid frame.
            ProtocolError: an envelope breaks a protocol rule.
        """
        envelopes, refused = self.decode_batch_partial(data)
        if refused:
            raise refused[0].error
        return envelopes

    def decode_batch_partial(self, data: bytes) -> tuple[list[Envelope], list[Refused]]:
        """Decodes a frame, keeping the good envelopes and saying why each bad one was refused.

        One malformed envelope in a batch loses nothing else: the rest are returned.

        Raises:
            CodecError: the frame itself is not valid (then no envelope can be trusted).
        """
        kind, body = self._frame(data)
        items = [body] if kind == _ONE else body
        envelopes: list[Envelope] = []
        refused: list[Refused] = []
        sealed = kind == _SEALED
        for i, item in enumerate(items):
            fields = item
            try:
                if sealed:
                    fields = self._open(item)
                envelopes.append(_envelope(fields))
            except (ProtocolError, AuthError) as exc:
                if sealed and fields is item:  # not opened: read what the sealed bytes say
                    fields = _peek_sealed(item)
                refused.append(Refused(i, exc, _peek(fields, 0), _peek(fields, _SENDER)))
        return envelopes, refused

    def _seal(self, e: Envelope) -> list[Any]:
        guard = self.guard
        assert guard is not None
        fields = _fields(e)
        kid = None
        if guard.encrypts(e.session_id):
            kid = guard.keyring.current
            aad = header_aad(sender=e.sender, receiver=e.receiver, msg_type=e.msg_type.value,
                             msg_id=e.msg_id, schema=e.payload_schema or "",
                             timestamp=e.timestamp, kid=kid)
            used, nonce, ciphertext = guard.cipher.encrypt(self._packb(fields[_PAYLOAD]), aad)
            assert used == kid
            fields[_PAYLOAD] = [nonce, ciphertext]
        fields.append(kid)
        sealed = self._packb(fields)
        sig = guard.sign(e.sender, sealed)
        return [sealed, sig.timestamp, sig.nonce, sig.mac]

    def _open(self, item: Any) -> list[Any]:
        """The field array of a sealed envelope, verified and decrypted.

        Raises:
            AuthError: bad signature, replay, unknown key or ciphertext that does not decrypt.
            CodecError: the item is not a sealed envelope.
        """
        guard = self.guard
        if guard is None:
            raise CodecError("a signed envelope arrived where signing is off: the two sides run "
                             "with different security settings",
                             details={"rule": "signing_off"})
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], bytes)
                and isinstance(item[1], float) and isinstance(item[2], bytes)
                and isinstance(item[3], bytes)):
            raise CodecError("a sealed envelope must be [bytes, float, bytes, bytes]",
                             details={"rule": "sealed_shape"})
        sealed = item[0]
        fields = _unpack(sealed)
        if not isinstance(fields, list) or len(fields) - 1 not in _SIZES:
            raise CodecError(f"a sealed envelope must hold {BASE_FIELDS + 1} or "
                             f"{len(FIELDS) + 1} fields", details={"rule": "envelope_shape"})
        sender = fields[_SENDER]
        if not isinstance(sender, str) or not sender:
            raise CodecError("a sealed envelope names no sender", details={"rule": "sender"})
        guard.verify(sender, sealed, Signature(item[1], item[2], item[3]))
        kid = fields.pop()
        session_id = fields[10]
        if kid is None:
            if guard.encrypts(session_id if isinstance(session_id, str) else None):
                raise AuthError(f"a payload from {sender!r} came in clear where payloads are "
                                "encrypted", details={"reason": "not_encrypted",
                                                      "principal": sender})
            return fields
        box = fields[_PAYLOAD]
        if not (isinstance(kid, str) and isinstance(box, list) and len(box) == 2
                and isinstance(box[0], bytes) and isinstance(box[1], bytes)):
            raise CodecError("an encrypted payload must be [nonce, ciphertext] with a key ID",
                             details={"rule": "ciphertext"})
        schema = fields[5]
        aad = header_aad(sender=sender, receiver=fields[3], msg_type=fields[1],
                         msg_id=fields[0], schema=schema or "", timestamp=fields[13], kid=kid)
        fields[_PAYLOAD] = _unpack(guard.cipher.decrypt(kid, box[0], box[1], aad))
        return fields

    def _packb(self, value: Any) -> bytes:
        try:
            data: bytes = msgpack.packb(value, use_bin_type=True, unicode_errors="strict")
        except UnicodeEncodeError as exc:
            raise CodecError(
                f"a string is not valid UTF-8 ({exc.reason} at position {exc.start})",
                details={"rule": "utf8"},
            ) from exc
        except (TypeError, ValueError, OverflowError) as exc:
            raise CodecError(
                f"a value has no msgpack form: {exc}", details={"rule": "type"}
            ) from exc
        return data

    def _pack(self, frame: list[Any]) -> bytes:
        data = self._packb(frame)
        if len(data) > self.max_frame_bytes:
            raise _oversize(len(data), self.max_frame_bytes)
        return data

    def _frame(self, data: bytes) -> tuple[int, list[Any]]:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise CodecError(f"a frame must be bytes, got {type(data).__name__}")
        if len(data) > self.max_frame_bytes:
            raise _oversize(len(data), self.max_frame_bytes)
        frame = _unpack(data)
        if not (isinstance(frame, list) and len(frame) == 3):
            raise CodecError(
                "frame is not a 3-element array [version, kind, body]", details={"rule": "frame"}
            )
        version, kind, body = frame
        if version != WIRE_VERSION or type(version) is not int:
            raise CodecError(
                f"unsupported wire version {version!r}; this side speaks {WIRE_VERSION}",
                details={"rule": "wire_version"},
            )
        if kind not in (_ONE, _BATCH, _SEALED) or type(kind) is not int:
            raise CodecError(f"unknown frame kind {kind!r}", details={"rule": "frame_kind"})
        if not isinstance(body, list):
            raise CodecError(
                f"frame body must be an array, got {type(body).__name__}", details={"rule": "frame"}
            )
        if kind != _SEALED and self.guard is not None:
            raise AuthError("an unsigned frame was refused: signing is on in this deployment",
                            suggestion="run every process with the deployment's security settings",
                            details={"reason": "unsigned"})
        return kind, body


def _fields(e: Envelope) -> list[Any]:
    info = e.error_info
    fields = [
        e.msg_id, e.msg_type.value, e.sender, e.receiver, e.payload, e.payload_schema,
        e.request_id, e.timeout_ms, e.deadline, e.trace_id, e.session_id, list(e.hops),
        None if info is None else info.model_dump(mode="json"), e.timestamp,
    ]
    if e.span_id is not None:
        fields += (e.span_id, e.trace_flags)
    return fields


def _envelope(item: Any) -> Envelope:
    if not isinstance(item, list) or len(item) not in _SIZES:
        size = len(item) if isinstance(item, list) else type(item).__name__
        raise CodecError(
            f"an envelope must be an array of {BASE_FIELDS} fields (or {len(FIELDS)}, with its "
            f"trace context), got {size}",
            details={"rule": "envelope_shape"},
        )
    try:
        return Envelope.parse(dict(zip(FIELDS, item, strict=False)))
    except RecursionError as exc:
        # msgpack nests up to 1024 levels, deeper than Python can repr or validate some fields.
        raise CodecError(
            "an envelope field is nested too deeply to validate", details={"rule": "depth"}
        ) from exc


def _peek(item: Any, index: int) -> str | None:
    if isinstance(item, list) and len(item) > index and isinstance(item[index], str):
        peeked: str = item[index]
        return peeked
    return None


def _peek_sealed(item: Any) -> Any:
    """The field array inside a sealed item, unverified (only to address a refusal)."""
    if isinstance(item, list) and item and isinstance(item[0], bytes):
        try:
            return _unpack(item[0])
        except CodecError:
            return None
    return None


def _reject_ext(code: int, _data: bytes) -> Any:
    raise CodecError(f"msgpack extension type {code} is not allowed", details={"rule": "ext"})


def _unpack(data: bytes | bytearray | memoryview) -> Any:
    try:
        # max_ext_len=0 also refuses the timestamp extension (-1), which bypasses ext_hook.
        return msgpack.unpackb(
            data, raw=False, strict_map_key=True, ext_hook=_reject_ext, max_ext_len=0, timestamp=0,
            unicode_errors="strict",
        )
    except CodecError:
        raise
    except UnicodeDecodeError as exc:
        raise CodecError(
            f"invalid UTF-8 in a string at byte {exc.start}: {exc.reason}", details={"rule": "utf8"}
        ) from exc
    except msgpack.ExtraData as exc:
        raise CodecError("trailing bytes after the frame", details={"rule": "extra_data"}) from exc
    except (ValueError, TypeError, RecursionError, OverflowError, MemoryError) as exc:
        if "max_ext_len" in str(exc):
            msg = "msgpack extension types are not allowed"
            raise CodecError(msg, details={"rule": "ext"}) from exc
        # msgpack's FormatError, StackError and OutOfData are ValueErrors; a non-string map key
        # is a ValueError under strict_map_key; an unhashable one a TypeError.
        reason = str(exc) or "unexpected or reserved byte"
        raise CodecError(
            f"malformed msgpack ({type(exc).__name__}): {reason}", details={"rule": "msgpack"}
        ) from exc


def _oversize(size: int, limit: int) -> CodecError:
    return CodecError(
        f"frame of {size} bytes exceeds the maximum frame size of {limit} bytes",
        suggestion="send a smaller payload or negotiate a larger maximum message size",
        details={"rule": "frame_size", "size": size, "limit": limit},
    )


def encode(envelope: Envelope) -> bytes:
    """Encodes one envelope with the default codec (see :meth:`Codec.encode`)."""
    return _default.encode(envelope)


def decode(data: bytes) -> Envelope:
    """Decodes one envelope with the default codec (see :meth:`Codec.decode`)."""
    return _default.decode(data)


def encode_batch(envelopes: Sequence[Envelope]) -> bytes:
    """Encodes a batch with the default codec (see :meth:`Codec.encode_batch`)."""
    return _default.encode_batch(envelopes)


def decode_batch(data: bytes) -> list[Envelope]:
    """Decodes a batch with the default codec (see :meth:`Codec.decode_batch`)."""
    return _default.decode_batch(data)


_default = Codec()

__all__ = [
    "BASE_FIELDS", "DEFAULT_MAX_FRAME_BYTES", "FIELDS", "WIRE_VERSION", "Codec", "Refused",
    "decode", "decode_batch", "encode", "encode_batch",
]
