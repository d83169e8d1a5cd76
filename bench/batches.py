"""A large answer batch: N questions (10,000 by default) over 3 stored text documents, through
Citegate served with its embedded local engine (no fake: the local engine's Message Batches API
answers the batch in the background, in Citegate's own process).

Prints how long createAnswerBatch took (every request checked and built, the Message Batch
sent, the batch and its requests stored), how fast the results were stored once the upstream
had ended (from the first stored result to the batch's end, as getAnswerBatch shows it), the
time the local engine took to answer, and Citegate's peak RSS and CPU. Asserts nothing.

    .venv/bin/python bench/batches.py [--requests 10000] [--database-url postgresql+asyncpg://…]
"""

from __future__ import annotations

import argparse
import os
import time

import httpx
from harness import cpu_seconds, peak_rss_mib, running

# Three short reports, a few sentences each: every question cites one of them.
DOCUMENTS = [
    (
        "Harbour report",
        " ".join(
            f"In week {n} the harbour handled {100 + n} ships and {2000 + 13 * n} containers."
            for n in range(1, 13)
        ),
    ),
    (
        "Orchard report",
        " ".join(
            f"Row {n} of the orchard gave {40 + n} crates of apples and {n % 5} of pears."
            for n in range(1, 13)
        ),
    ),
    (
        "Library report",
        " ".join(
            f"Branch {n} of the library lent {300 + 7 * n} books and {n * 3} films."
            for n in range(1, 13)
        ),
    ),
]
QUESTIONS = [
    "How many ships did the harbour handle in week {n}?",
    "How many crates of apples did row {n} of the orchard give?",
    "How many books did branch {n} of the library lend?",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--database-url", help="default: a new SQLite file")
    args = parser.parse_args()
    # Citegate polls every half second or so, so that the figures do not wait on a backoff.
    os.environ |= {"CITEGATE_BATCH_POLL_SECONDS": "0.5", "CITEGATE_BATCH_POLL_MAX_SECONDS": "1"}
    with (
        running(args.database_url, None) as stack,
        httpx.Client(base_url=stack.citegate, headers=stack.headers, timeout=600) as http,
    ):
        ids = []
        for title, text in DOCUMENTS:
            stored = http.post(
                "/v1/documents", json={"source": {"type": "text", "data": text}, "title": title}
            )
            stored.raise_for_status()
            ids.append(stored.json()["id"])
        requests = [
            {
                "custom_id": f"q{n}",
                "question": QUESTIONS[n % 3].format(n=1 + n % 12),
                "document_ids": ids,
            }
            for n in range(args.requests)
        ]
        cpu_before = cpu_seconds(stack.pid)
        began = time.perf_counter()
        created = http.post("/v1/answer-batches", json={"requests": requests})
        created_in = time.perf_counter() - began
        created.raise_for_status()
        batch_id = created.json()["id"]

        first_stored = None
        while True:
            batch = http.get(f"/v1/answer-batches/{batch_id}").json()
            counts = batch["request_counts"]
            now = time.perf_counter()
            if first_stored is None and counts["succeeded"] + counts["errored"] > 0:
                first_stored, stored_then = now, counts["succeeded"] + counts["errored"]
            if batch["status"] == "ended":
                break
            time.sleep(0.02)
        ended_at = time.perf_counter()
        assert first_stored is not None
        stored = args.requests - stored_then
        storing = max(ended_at - first_stored, 1e-9)
        results = http.get(f"/v1/answer-batches/{batch_id}/results", params={"limit": 1}).json()
        print(f"database: {stack.database}; {args.requests} requests over 3 documents")
        print(f"createAnswerBatch: {created_in:.2f} s")
        print(f"upstream (local engine) answering: {first_stored - began - created_in:.1f} s")
        print(
            f"results stored: {stored} in {storing:.2f} s after the first, "
            f"{stored / storing:.0f} answers/s"
        )
        print(f"final counts: {counts}; first result: {results['data'][0]['status']}")
        print(f"Citegate peak RSS: {peak_rss_mib(stack.pid):.0f} MiB")
        print(f"Citegate CPU: {cpu_seconds(stack.pid) - cpu_before:.1f} s")


if __name__ == "__main__":
    main()
