"""What scripts/image-check asks the running image, over HTTP as a client would: it is ready
(database and upstream), a PDF uploads, and a question about it gets an answer from the local
engine with a verified citation into that PDF. Standard library only, so it runs with any
Python 3.11 beside the image. Exits non-zero with the reason on the first thing that is wrong.

    python3 scripts/image_smoke.py BASE_URL API_KEY PDF [LARGE_FILE]

PDF is the sample letter the question is about; LARGE_FILE, if given, is uploaded too (a file
over 1 MB, which the server spools to its temporary folder on the way in).
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any


class Failed(Exception):
    pass


def call(
    base_url: str,
    key: str,
    method: str,
    path: str,
    *,
    body: bytes | None = None,
    content_type: str | None = None,
    expect: tuple[int, ...] = (200,),
) -> Any:
    if not base_url.startswith(("http://", "https://")):
        raise Failed(f"not an HTTP address: {base_url}")
    url = f"{base_url}{path}"
    request = urllib.request.Request(url, data=body, method=method)  # noqa: S310 (http checked)
    request.add_header("authorization", f"Bearer {key}")
    if content_type:
        request.add_header("content-type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        status, text = error.code, error.read().decode()
    if status not in expect:
        raise Failed(f"{method} {path}: {status}, expected {expect}: {text[:2000]}")
    return json.loads(text) if text else None


def multipart(fields: dict[str, str], name: str, filename: str, data: bytes) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\ncontent-disposition: form-data; name="{field}"\r\n\r\n'
        f"{value}\r\n".encode()
        for field, value in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\ncontent-disposition: form-data; name="{name}"; filename="{filename}"\r\n'
        "content-type: application/pdf\r\n\r\n".encode()
        + data
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def upload(base_url: str, key: str, path: Path) -> Any:
    body, content_type = multipart({"title": "Image check"}, "file", path.name, path.read_bytes())
    document = call(
        base_url,
        key,
        "POST",
        "/v1/documents/upload",
        body=body,
        content_type=content_type,
        expect=(201,),
    )
    print(f"uploaded {path.name} ({path.stat().st_size} bytes): {document['id']}")
    return document


def check(base_url: str, key: str, pdf: Path, large: Path | None) -> str:
    ready = call(base_url, key, "GET", "/readyz")
    print(f"readyz: {json.dumps(ready, sort_keys=True)}")
    # The database answered (200); Redis holds the rate limits; no API key: the local engine.
    if ready.get("rate_limits") != "ok" or ready.get("upstream") != "local":
        raise Failed(f"not ready as configured: {json.dumps(ready)}")
    # Without a key the API refuses: the image runs with CITEGATE_AUTH=required.
    call(base_url, "cg_not_a_key", "GET", "/v1/documents", expect=(401,))

    if large is not None:
        upload(base_url, key, large)
    document = upload(base_url, key, pdf)

    question = {
        "question": "What was Amazon's total revenue in 2023?",
        "document_ids": [document["id"]],
    }
    answer = call(
        base_url,
        key,
        "POST",
        "/v1/answers",
        body=json.dumps(question).encode(),
        content_type="application/json",
    )
    if answer.get("status") != "completed":
        raise Failed(f"the answer is not completed: {json.dumps(answer)[:2000]}")
    citations = [c for s in answer.get("segments") or [] for c in s.get("citations") or []]
    verified = [
        c for c in citations if c.get("verified") is True and c.get("document_id") == document["id"]
    ]
    if not verified:
        raise Failed(f"no verified citation into the PDF: {json.dumps(answer)[:2000]}")
    print(
        f"answer {answer['id']} by {answer.get('model')}: {len(verified)} verified citation(s), "
        f"the first: {verified[0].get('cited_text', '')[:80]!r}"
    )
    stored = call(base_url, key, "GET", f"/v1/answers/{answer['id']}")
    if stored.get("id") != answer["id"]:
        raise Failed(f"the stored answer differs: {json.dumps(stored)[:2000]}")
    return str(answer["id"])


def main() -> int:
    base_url, key, pdf = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    large = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    try:
        check(base_url.rstrip("/"), key, pdf, large)
    except (Failed, OSError, ValueError, KeyError) as error:
        print(f"image smoke check failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
