"""Length-prefixed JSON messages over a socket: the only channel between parent and child.

JSON, not pickle: the parent must never unpickle what untrusted code wrote.
Every message is size-capped on read so a child cannot exhaust the parent's memory.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
from typing import Any

HEADER = struct.Struct(">I")
MAX_MESSAGE_BYTES = 32 << 20


class WireError(Exception):
    """The peer closed the channel or sent something that is not a valid message."""


class MessageTooLarge(WireError):
    """The peer announced a message above the size cap (the stream cannot be resynchronized)."""


class Channel:
    """A socket carrying whole JSON messages; `send` is safe from many threads."""

    def __init__(self, sock: socket.socket, *, max_bytes: int = MAX_MESSAGE_BYTES):
        self.sock = sock
        self.max_bytes = max_bytes
        self._send_lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, default=str).encode()
        with self._send_lock:
            self.sock.sendall(HEADER.pack(len(data)) + data)

    def recv(self) -> dict[str, Any]:
        (size,) = HEADER.unpack(self._read(HEADER.size))
        if size > self.max_bytes:
            raise MessageTooLarge(f"a message of {size} bytes exceeds the {self.max_bytes}-byte limit")
        try:
            message = json.loads(self._read(size))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise WireError(f"malformed message: {error}") from error
        if not isinstance(message, dict) or not isinstance(message.get("type"), str):
            raise WireError("a message must be a JSON object with a string 'type'")
        return message

    def _read(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = self.sock.recv(min(left, 1 << 20))
            if not chunk:
                raise WireError("the peer closed the channel")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
