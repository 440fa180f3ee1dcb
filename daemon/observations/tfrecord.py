"""Incremental reader for TensorBoard event files (TFRecord framing) that survives damage.

A record is: uint64 length, uint32 masked CRC32C of the length, `length` bytes of data, uint32
masked CRC32C of the data. tensorboard's own loader stops for good at the first bad record, so one
torn or overwritten record in a live file freezes progress reading while the trainer goes on (and
`no_progress` then restarts a healthy trainer). This reader:
  * waits at an incomplete record at the end of the file (the writer is mid-append);
  * skips a complete record whose data fails its CRC or does not parse;
  * after a bad header, resynchronises on the next offset where a whole valid record starts;
and reports each damaged stretch once (`take_damage()`), so the supervisor can say the file is damaged.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

_HEADER = 12
_FOOTER = 4
MAX_RECORD = 64 << 20  # TensorBoard scalars are bytes; anything near this is garbage, not a record
MAX_READ = 8 << 20  # read at most this much per poll, so one huge backlog cannot stall a tick


def _header_ok(buf: bytes, pos: int) -> int | None:
    """Record length if a valid header starts at pos, else None."""
    (length,) = struct.unpack_from("<Q", buf, pos)
    if not 1 <= length <= MAX_RECORD:  # cheap reject first: zeros (a hole), random bytes
        return None
    (crc,) = struct.unpack_from("<I", buf, pos + 8)
    return length if masked_crc32c(buf[pos:pos + 8]) == crc else None


def _record_ok(buf: bytes, pos: int) -> bool:
    length = _header_ok(buf, pos)
    if length is None or pos + _HEADER + length + _FOOTER > len(buf):
        return False
    data = buf[pos + _HEADER:pos + _HEADER + length]
    (crc,) = struct.unpack_from("<I", buf, pos + _HEADER + length)
    return masked_crc32c(data) == crc


class EventFileReader:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.offset = 0
        self._damage: list[dict[str, Any]] = []
        self.damaged_bytes = 0

    def take_damage(self) -> list[dict[str, Any]]:
        out, self._damage = self._damage, []
        return out

    def _note(self, at: int, skipped: int, problem: str) -> None:
        self.damaged_bytes += skipped
        self._damage.append({"path": str(self.path), "offset": at, "skipped_bytes": skipped, "problem": problem})

    def read(self) -> list[event_pb2.Event]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                buf = fh.read(MAX_READ)
        except OSError:
            return []
        events: list[event_pb2.Event] = []
        pos = 0
        while len(buf) - pos >= _HEADER:
            length = _header_ok(buf, pos)
            if length is None:
                nxt = self._resync(buf, pos + 1)
                if nxt is None:
                    break  # nothing valid after it yet: wait for the writer to append more
                self._note(self.offset + pos, nxt - pos, "bad record header")
                pos = nxt
                continue
            end = pos + _HEADER + length + _FOOTER
            if end > len(buf):
                # incomplete: normally the writer is mid-append; but if a valid record starts inside it,
                # this one was torn and the file went on past it
                nxt = self._resync(buf, pos + 1)
                if nxt is None:
                    break
                self._note(self.offset + pos, nxt - pos, "torn record (cut short, more data follows)")
                pos = nxt
                continue
            data = buf[pos + _HEADER:end - _FOOTER]
            (crc,) = struct.unpack_from("<I", buf, end - _FOOTER)
            if masked_crc32c(data) != crc:
                nxt = self._resync(buf, pos + 1)
                skip_to = nxt if nxt is not None and nxt < end else end
                self._note(self.offset + pos, skip_to - pos, "record data fails its CRC")
                pos = skip_to
                continue
            try:
                events.append(event_pb2.Event.FromString(data))
            except Exception:  # noqa: BLE001 - protobuf's DecodeError; the CRC matched, so the writer wrote junk
                self._note(self.offset + pos, end - pos, "record is not a TensorBoard event")
            pos = end
        self.offset += pos
        return events

    @staticmethod
    def _resync(buf: bytes, start: int) -> int | None:
        """First offset >= start where a whole valid record begins."""
        for pos in range(start, len(buf) - _HEADER - _FOOTER + 1):
            if _record_ok(buf, pos):
                return pos
        return None
