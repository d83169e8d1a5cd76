"""The source cache: documents held by size, and how long the database's word on them lasts."""

from __future__ import annotations

from app.documents.index import DocumentIndex
from app.documents.sources import PromptDocument, RequestCost, SourceCache, SourceDocument


def source(
    document_id: str, text: str = "The grass is green.", tenant: str = "ten_a"
) -> SourceDocument:
    index = DocumentIndex(document_id, "text", text, [])
    prompt = PromptDocument(None, None, {"type": "text", "media_type": "text/plain", "data": text})
    cost = RequestCost(documents=1, bytes=len(text), tokens=len(text) // 4)
    return SourceDocument(document_id, tenant, None, (prompt,), index, len(text), cost)


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_recent_until_recheck_seconds_pass_since_the_database_was_asked() -> None:
    clock = Clock()
    cache = SourceCache(1000, recheck_seconds=5, clock=clock)
    a, b = source("doc_a"), source("doc_b")
    asked = cache.now()
    clock.now = 101.0  # building the prompt took a second: the database's word is from 100
    cache.put(a, asked)
    clock.now = 103.0
    cache.put(b, cache.now())
    assert cache.recent("ten_a", ["doc_b", "doc_a"]) == [b, a]
    clock.now = 105.0  # doc_a's five seconds are up: the whole question asks again
    assert cache.recent("ten_a", ["doc_b", "doc_a"]) is None
    assert cache.recent("ten_a", ["doc_b"]) == [b]
    assert cache.confirmed("doc_a", cache.now()) is a  # the database said so again
    assert cache.recent("ten_a", ["doc_b", "doc_a"]) == [b, a]
    clock.now = 108.0
    assert cache.recent("ten_a", ["doc_a"]) == [a]
    assert cache.recent("ten_a", ["doc_b"]) is None


def test_never_recent_for_another_tenant_an_unknown_id_or_with_no_recheck() -> None:
    clock = Clock()
    cache = SourceCache(1000, recheck_seconds=5, clock=clock)
    cache.put(source("doc_a"), cache.now())
    assert cache.recent("ten_b", ["doc_a"]) is None
    assert cache.recent("ten_a", ["doc_a", "doc_x"]) is None
    unchecked = SourceCache(1000, clock=clock)
    unchecked.put(source("doc_a"), unchecked.now())
    assert unchecked.recent("ten_a", ["doc_a"]) is None
    assert unchecked.confirmed("doc_a", clock()) is not None  # still held for the prompt


def test_a_question_that_read_a_document_before_its_delete_cannot_put_it_back() -> None:
    cache = SourceCache(1000, recheck_seconds=5, clock=Clock())
    asked = cache.now()  # the question reads the document...
    cache.forget("doc_a")  # ...a delete commits here...
    cache.put(source("doc_a"), asked)  # ...and the question holds what it read
    assert cache.recent("ten_a", ["doc_a"]) is None
    assert cache.confirmed("doc_a", asked) is None


def test_held_by_size_least_recently_used_first_and_forgotten_on_delete() -> None:
    cache = SourceCache(50, recheck_seconds=5, clock=Clock())
    a, b, c = (source(f"doc_{n}", "x" * 20) for n in "abc")
    cache.put(a, cache.now())
    cache.put(b, cache.now())
    assert cache.recent("ten_a", ["doc_a"]) == [a]  # a is now the most recently used
    cache.put(c, cache.now())  # 60 > 50: b goes
    assert cache.confirmed("doc_b", cache.now()) is None
    assert cache.recent("ten_a", ["doc_a", "doc_c"]) == [a, c]
    cache.forget("doc_a")
    assert cache.recent("ten_a", ["doc_a"]) is None
    cache.put(b, cache.now())  # 40 held after the delete: b fits again beside c
    assert cache.recent("ten_a", ["doc_b", "doc_c"]) == [b, c]
    cache.put(source("doc_big", "x" * 51), cache.now())  # larger than the whole cache
    assert cache.confirmed("doc_big", cache.now()) is None
