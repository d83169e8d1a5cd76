"""The upstream stream's event reader gives the events httpx-sse's decoders give, in the same
reads, whatever the stream holds and wherever its reads are cut: its shortcut for the Messages
API's own shape of event never changes what is read, nor when."""

from __future__ import annotations

import codecs
import itertools

from httpx_sse._decoders import SSEDecoder, SSELineDecoder
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.upstream.sse import MOST_PENDING, EventReader

Events = list[tuple[str, str]]


def decoded(chunks: list[bytes]) -> list[Events]:
    """The events of each read, then of the end, by httpx-sse's decoders alone (as Citegate
    read them before the reader's shortcut)."""
    lines, decoder = SSELineDecoder(), SSEDecoder()
    text = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")

    def events(read: list[str]) -> Events:
        return [
            (sse.event, sse.data) for line in read if (sse := decoder.decode(line)) and sse.data
        ]

    each = [events(lines.decode(text.decode(chunk))) for chunk in chunks]
    return [*each, events([*lines.decode(text.decode(b"", final=True)), *lines.flush()])]


def read(chunks: list[bytes]) -> list[Events]:
    reader = EventReader()
    return [*(reader.feed(chunk) for chunk in chunks), reader.end()]


def cut(stream: bytes, at: list[int]) -> list[bytes]:
    """The stream cut at these places (modulo its length; a place twice makes an empty read)."""
    bounds = [0, *sorted(n % (len(stream) + 1) for n in at), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


MESSAGES_API = (
    b'event: message_start\ndata: {"type": "message_start", "message": {"id": "msg_1"}}\n\n'
    b'event: content_block_delta\ndata: {"type": "content_block_delta", "delta": '
    b'{"type": "text_delta", "text": "caf\xc3\xa9 \xe2\x82\xac"}}\n\n'
    b'event: ping\ndata: {"type": "ping"}\n\n'
    b'event: message_stop\ndata: {"type": "message_stop"}\n\n'
)

# Pieces of streams: the Messages API's shape, and every rule of the SSE format beside it.
EVENT = b'event: content_block_delta\ndata: {"type": "content_block_delta"}\n\n'
PIECES = [
    EVENT,
    b'data: {"lone": "data"}\n\n',
    b"event: content_block_delta\n",
    b'data: {"text": "x"}\n',
    b"data: second line\n",
    b"data:no space\n",
    b"data: \n",
    b"data\n",
    b"event:  two spaces\n",
    b"event: \n",
    b": a comment\n",
    b"id: 7\n",
    b"retry: 100\n",
    b"other: field\n",
    b"\n",
    b"\r\n",
    b"\r",
    b"\xef\xbb\xbf",
    b"\xe2\x82\xac",
    b"\xe2\x82",
    b"\xff",
    b"data: a:b\n",
    b"event: e\ndata: d\n\n",
    b"event:x\n",
    b"id: \x00\n",
    b"\xef",
    b"\xef\xbb",
]


@settings(max_examples=600, deadline=None)
@given(
    # Half the pieces whole events of the Messages API's shape, the shortcut's own.
    st.lists(st.one_of(st.just(EVENT), st.sampled_from(PIECES)), max_size=24),
    st.lists(st.integers(min_value=0), max_size=12),
)
@example([MESSAGES_API], [])
@example([MESSAGES_API], list(range(len(MESSAGES_API))))  # a byte a read
@example([b"\xef\xbb\xbf", MESSAGES_API], [1, 2, 30])  # a byte-order mark, itself cut
@example([MESSAGES_API, b"event: a\r\ndata: b\r\n\r\n", MESSAGES_API], [10, 400])
@example([b"event: \n", b"data: d\n", b"\n"], [])  # no name: "message"
@example([b"event: e\n", b"data: a\n", b"data: b\n", b"\n"], [])  # data of two lines
@example([b"data: a\n", b"data: b\n", b"\n"], [])
def test_the_reader_reads_what_the_decoders_read(pieces: list[bytes], at: list[int]) -> None:
    stream = b"".join(pieces)
    chunks = cut(stream, at)
    assert read(chunks) == decoded(chunks)


def test_an_event_longer_than_the_reader_holds_is_read_by_the_decoders() -> None:
    long = b'event: message_start\ndata: {"text": "' + b"x" * (MOST_PENDING * 3) + b'"}\n\n'
    stream = MESSAGES_API + long + MESSAGES_API
    chunks = cut(stream, list(range(100, len(stream), 4096)))
    assert read(chunks) == decoded(chunks)
    assert sum(len(events) for events in read(chunks)) == 9


def test_the_messages_api_shape_is_read_whole() -> None:
    events = [event for events in read(cut(MESSAGES_API, [5, 90, 91, 160])) for event in events]
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_delta",
        "ping",
        "message_stop",
    ]
    assert "café €" in events[1][1]


def test_an_event_is_given_once_its_blank_line_has_come() -> None:
    reader = EventReader()
    assert reader.feed(b"event: ping\ndata: {}\n") == []
    assert reader.feed(b"\n") == [("ping", "{}")]
    assert reader.feed(b"event: ping\ndata: {}") == []
    assert reader.end() == []  # a stream that ends mid-event: no event
