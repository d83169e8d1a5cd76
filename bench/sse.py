"""What reading an upstream stream's events costs, in process: ``app.upstream.sse.EventReader``
against httpx-sse's decoders alone (what Citegate used before it), on bench/overhead.py's fake
streamed answer (18 events) read whole and a read per event, and on one event of 1 MiB in
reads of 4 KiB (the case where the reader hands over to the decoders). Microseconds of CPU
(process_time), best of --repetitions. Asserts nothing.

    .venv/bin/python bench/sse.py [--repetitions 5]
"""

from __future__ import annotations

import argparse
import codecs
import time
from collections.abc import Callable

from httpx_sse._decoders import SSEDecoder, SSELineDecoder
from overhead import TEXTS, fake_events, fake_reply

from app.upstream.sse import EventReader

Reader = Callable[[list[bytes]], int]


def with_reader(chunks: list[bytes]) -> int:
    reader = EventReader()
    return sum(len(reader.feed(chunk)) for chunk in chunks) + len(reader.end())


def with_decoders(chunks: list[bytes]) -> int:
    lines, decoder, found = SSELineDecoder(), SSEDecoder(), 0
    text = codecs.getincrementaldecoder("utf-8-sig")(errors="replace")
    for chunk in [*chunks, b""]:
        for line in lines.decode(text.decode(chunk, final=not chunk)):
            sse = decoder.decode(line)
            found += sse is not None and bool(sse.data)
    return found


def cost_us(read: Reader, chunks: list[bytes], repetitions: int) -> float:
    """The best of ``repetitions`` means over enough runs to last about 0.2 s."""
    runs = max(1, int(0.2 / max(_once(read, chunks), 1e-6)))
    best = float("inf")
    for _ in range(repetitions):
        started = time.process_time()
        for _ in range(runs):
            read(chunks)
        best = min(best, (time.process_time() - started) / runs)
    return best * 1e6


def _once(read: Reader, chunks: list[bytes]) -> float:
    started = time.process_time()
    read(chunks)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    stream = fake_events(fake_reply(TEXTS))
    events = stream.split(b"\n\n")[:-1]
    long = b'event: message_start\ndata: {"text": "' + b"x" * 2**20 + b'"}\n\n'
    cases = {
        f"{len(events)} events in one read": [stream],
        f"{len(events)} events, a read each": [event + b"\n\n" for event in events],
        "one event of 1 MiB in 4 KiB reads": [
            long[n : n + 4096] for n in range(0, len(long), 4096)
        ],
    }
    for name, chunks in cases.items():
        count = with_reader(chunks)
        if count != with_decoders(chunks):
            raise SystemExit(f"{name}: the reader and the decoders disagree")
        ours, theirs = (
            cost_us(read, chunks, args.repetitions) for read in (with_reader, with_decoders)
        )
        print(
            f"{name}: EventReader {ours:8.1f} us ({ours / count:6.2f} an event), "
            f"httpx-sse's decoders {theirs:8.1f} us ({theirs / count:6.2f} an event)"
        )


if __name__ == "__main__":
    main()
