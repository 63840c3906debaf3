"""The wire between `gpudeck session attach` and a session's terminal on its worker (jobs.run.terminal serves it,
tui.attach speaks it): plain TCP on 127.0.0.1 of the worker's host, standard library only.

- The client opens with one line, `GPUDECK-ATTACH 1 SECRET ROWS COLS\\n`; the server answers `OK\\n`, or
  `NO why\\n` and closes. SECRET is the session's own (its owner reads it from the API), so knowing the port is
  not enough.
- Then the client sends frames: one type byte (`d`: keystrokes, `w`: the window's new size as `ROWS COLS`), a
  4-byte big-endian length, the payload. The server sends the terminal's output as it is, and closes when the
  session's terminal is gone."""

from __future__ import annotations

import struct

HELLO = b"GPUDECK-ATTACH 1"
DATA, RESIZE = b"d", b"w"
HEADER = struct.Struct(">cI")
MAX_FRAME = 1 << 20
DETACH_KEY = b"\x1d"
"""Ctrl-]: the attach client detaches (the session goes on) instead of sending it."""


def hello(secret: str, rows: int, cols: int) -> bytes:
    return b"%s %s %d %d\n" % (HELLO, secret.encode(), rows, cols)


def parse_hello(line: bytes) -> tuple[str, int, int] | None:
    """(secret, rows, cols) of a client's first line, or None when it is not one."""
    parts = line.strip().split(b" ")
    if len(parts) != 5 or b" ".join(parts[:2]) != HELLO:
        return None
    try:
        return parts[2].decode(), int(parts[3]), int(parts[4])
    except ValueError:
        return None


def frame(kind: bytes, payload: bytes) -> bytes:
    return HEADER.pack(kind, len(payload)) + payload


def frames(buffer: bytearray) -> list[tuple[bytes, bytes]]:
    """The complete frames at the start of `buffer`, taken out of it (ValueError: not frames)."""
    out = []
    while len(buffer) >= HEADER.size:
        kind, size = HEADER.unpack_from(buffer)
        if kind not in (DATA, RESIZE) or size > MAX_FRAME:
            raise ValueError(f"not a frame: {bytes(buffer[: HEADER.size])!r}")
        if len(buffer) < HEADER.size + size:
            break
        out.append((kind, bytes(buffer[HEADER.size : HEADER.size + size])))
        del buffer[: HEADER.size + size]
    return out


def size_payload(rows: int, cols: int) -> bytes:
    return b"%d %d" % (rows, cols)


def parse_size(payload: bytes) -> tuple[int, int] | None:
    try:
        rows, cols = (int(x) for x in payload.split())
    except ValueError:
        return None
    return (rows, cols) if 0 < rows < 10_000 and 0 < cols < 10_000 else None
