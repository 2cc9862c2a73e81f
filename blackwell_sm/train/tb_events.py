"""A TensorBoard event-file writer in the standard library: scalars and text, nothing else.

TensorBoard reads `events.out.tfevents.*` files: TFRecord framing (a little-endian uint64
length, its masked CRC-32C, the bytes, their masked CRC-32C) around serialized `Event`
protocol buffers. The few messages written here are encoded by hand (field numbers from
tensorboard's `event.proto`, `summary.proto`, `tensor.proto`), so the container carries no
protobuf, tensorboard or tensorboardX wheel and cannot clash with the image's protobuf.
TensorBoard's own reader loads the files (tests/test_trackers.py); the cost per step is in
benchmarks/tracker_cost.py.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

_CRC_TABLE: list[int] = []


def _table() -> list[int]:
    if not _CRC_TABLE:
        for n in range(256):
            c = n
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1  # Castagnoli, reflected
            _CRC_TABLE.append(c)
    return _CRC_TABLE


def crc32c(data: bytes) -> int:
    t, c = _table(), 0xFFFFFFFF
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _masked(data: bytes) -> bytes:
    c = crc32c(data)
    return struct.pack("<I", (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1  # int64 as protobuf sends it
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _event(step: int, wall_time: float, *, summary: bytes = b"", version: str = "") -> bytes:
    out = b"\x09" + struct.pack("<d", wall_time) + b"\x10" + _varint(step)  # fields 1, 2
    if version:
        out += _field(3, version.encode())  # file_version
    if summary:
        out += _field(5, summary)  # Summary
    return out


def scalar_value(tag: str, value: float) -> bytes:
    """Summary.Value {tag: 1, simple_value: 2 (float32)}."""
    return _field(1, _field(1, tag.encode()) + b"\x15" + struct.pack("<f", value))


def text_value(tag: str, text: str) -> bytes:
    """Summary.Value for TensorBoard's text plugin: metadata.plugin_data.plugin_name "text" and
    a scalar DT_STRING tensor."""
    metadata = _field(1, _field(1, b"text"))  # SummaryMetadata.plugin_data {plugin_name}
    tensor = b"\x08\x07" + _field(2, b"") + _field(8, text.encode())  # dtype, shape, string_val
    return _field(1, _field(1, tag.encode()) + _field(9, metadata) + _field(8, tensor))


class EventWriter:
    """Appends events to one `events.out.tfevents.<time>.<host>.<pid>` file under `logdir`."""

    def __init__(self, logdir: Path) -> None:
        logdir.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
        self.path = logdir / name
        self._f = open(self.path, "ab")  # noqa: SIM115 (kept open for the run; closed in close)
        self._write(_event(0, time.time(), version="brain.Event:2"))

    def _write(self, event: bytes) -> None:
        head = struct.pack("<Q", len(event))
        self._f.write(head + _masked(head) + event + _masked(event))

    def scalars(self, step: int, values: dict[str, float], wall_time: float | None = None) -> None:
        if values:
            summary = b"".join(scalar_value(k, v) for k, v in values.items())
            self._write(_event(step, wall_time or time.time(), summary=summary))

    def text(self, step: int, tag: str, text: str, wall_time: float | None = None) -> None:
        self._write(_event(step, wall_time or time.time(), summary=text_value(tag, text)))

    def flush(self) -> None:
        self._f.flush()

    def close(self) -> None:
        if not self._f.closed:
            self._f.flush()
            self._f.close()
