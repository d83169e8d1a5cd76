"""The server-sent events of an upstream stream, read from its bytes a read at a time.

An event of the shape the Messages API sends, ``event: NAME\\ndata: JSON\\n\\n`` (or its data
line alone), is taken straight from the bytes: split at its blank line and its line break,
decoded once. Anything else (a comment, a field without its space, data of several lines, an
``id`` or ``retry``) goes to httpx-sse's decoders as it is, which implement the SSE rules; from
the first read with a carriage return, or from the start of a stream that begins with a
byte-order mark, or once one event has grown past ``MOST_PENDING`` without its end, the rest of
the stream goes there too (their line splitting is stateful, and they read a long event in
linear time). Either way the events come out the same, each in the same read
(tests/unit/test_sse.py compares the two over random streams cut at random places). What the
shortcut saves is measured by ``bench/sse.py``.
"""

from __future__ import annotations

import codecs

from httpx_sse._decoders import SSEDecoder, SSELineDecoder

BOM = codecs.BOM_UTF8
_EVENT, _DATA = b"event: ", b"data: "
# An event still without its end past this many bytes goes to the decoders: each read would
# otherwise copy and search all of it again.
MOST_PENDING = 64 * 1024


class EventReader:
    """Feeds on the bytes of one stream; gives the name and data of each event they complete
    that has data (an event of no data is no event to relay: the SSE specification's rule for
    dispatching one)."""

    def __init__(self) -> None:
        self._pending = b""  # after the last blank line seen
        self._lines = SSELineDecoder()
        self._decoder = SSEDecoder()
        # An event stream is always UTF-8 (the SSE specification), whatever its header says.
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._plain: bool | None = None  # None until the stream's first bytes are seen

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        if self._plain is None:
            if not chunk:
                return []
            head = (self._pending + chunk)[:3]
            if BOM.startswith(head) and len(head) < 3:  # too short to tell: wait for more
                self._pending += chunk
                return []
            self._plain = not head.startswith(BOM)
            if not self._plain:  # the leading mark dropped, as the specification says
                self._text = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
        if self._plain and b"\r" in chunk:
            self._plain = False  # a CR may end a line: the decoders' splitting from now on
        if not self._plain:
            chunk, self._pending = self._pending + chunk, b""
            return self._decoded(chunk)
        blocks = (self._pending + chunk if self._pending else chunk).split(b"\n\n")
        self._pending = blocks.pop()  # what follows the last blank line
        if len(self._pending) > MOST_PENDING:
            rest, self._pending, self._plain = self._pending, b"", False
            # It begins after a blank line, where the decoders hold no state.
            return [*self._events(blocks), *self._decoded(rest)]
        return self._events(blocks)

    def _events(self, blocks: list[bytes]) -> list[tuple[str, str]]:
        events: list[tuple[str, str]] = []
        for block in blocks:
            name, newline, line = block.partition(b"\n")
            if not newline and name.startswith(_DATA):  # data alone: the event is "message"
                name, line = b"event: message", name
            if name.startswith(_EVENT) and line.startswith(_DATA) and b"\n" not in line:
                if len(line) > len(_DATA):  # else no data: no event
                    kind = name[len(_EVENT) :].decode("utf-8", "replace") or "message"
                    events.append((kind, line[len(_DATA) :].decode("utf-8", "replace")))
            else:
                lines = block.decode("utf-8", "replace").split("\n")
                events += self._dispatched([*lines, ""])
        return events

    def end(self) -> list[tuple[str, str]]:
        """What the stream's last bytes complete once it has ended (its last line, unended)."""
        rest, self._pending = self._pending, b""
        return self._decoded(rest, final=True)

    def _decoded(self, data: bytes, final: bool = False) -> list[tuple[str, str]]:
        """The events these bytes complete, read by the decoders (all their lines, at the end)."""
        lines = self._lines.decode(self._text.decode(data, final=final))
        return self._dispatched([*lines, *self._lines.flush()] if final else lines)

    def _dispatched(self, lines: list[str]) -> list[tuple[str, str]]:
        events = []
        for line in lines:
            sse = self._decoder.decode(line)
            if sse is not None and sse.data:
                events.append((sse.event, sse.data))
        return events
