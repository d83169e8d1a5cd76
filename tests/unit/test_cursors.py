"""Cursors: what ``encode_cursor`` makes decodes back, and what ``PageCursor`` signs opens for
the same list and key only; anything else is 422 ``invalid_cursor``."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import ErrorCode, InvalidRequest
from app.pagination import PageCursor, decode_cursor, decode_index_cursor, encode_cursor


def forged(key: str) -> str:
    """A cursor in our format around any key, as a client could build one."""
    return encode_cursor(key)


@given(st.text().filter(lambda key: "\x00" not in key))
def test_a_key_comes_back(key: str) -> None:
    assert decode_cursor(encode_cursor(key)) == key


@given(st.integers(min_value=0, max_value=2**31 - 1))
def test_an_index_comes_back(index: int) -> None:
    assert decode_index_cursor(encode_cursor(str(index))) == index


@pytest.mark.parametrize(
    "cursor",
    [
        "%%%",
        "",
        base64.urlsafe_b64encode(b"no-mark").decode(),
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        forged("a\x00b"),
    ],
)
def test_a_cursor_we_did_not_make_is_refused(cursor: str) -> None:
    for decode in (decode_cursor, decode_index_cursor):
        with pytest.raises(InvalidRequest) as raised:
            decode(cursor)
        assert raised.value.code is ErrorCode.INVALID_CURSOR
        assert raised.value.status == 422


@pytest.mark.parametrize(
    "key",
    ["not-a-number", "-1", "1.5", " 1", "²", "١٢", str(2**31), "9" * 5000],
)
def test_an_index_cursor_holds_a_small_ascii_number(key: str) -> None:
    with pytest.raises(InvalidRequest) as raised:
        decode_index_cursor(forged(key))
    assert raised.value.code is ErrorCode.INVALID_CURSOR


KEY = b"k" * 32


@given(st.text().filter(lambda key: "\x00" not in key), st.text())
def test_a_signed_cursor_comes_back_for_its_own_list(key: str, scope: str) -> None:
    signed = PageCursor(KEY, scope, None).next(encode_cursor(key))
    assert signed is not None
    opened = PageCursor(KEY, scope, signed).value
    assert opened is not None and decode_cursor(opened) == key


def test_no_next_page_no_cursor() -> None:
    assert PageCursor(KEY, "list", None).next(None) is None
    assert PageCursor(KEY, "list", None).value is None


# Another secret, as the setting holds one: text with no NUL (HMAC pads a short key with
# zeros, so b"k" and b"k\x00" are one key; an environment variable holds no NUL).
OTHER_SECRETS = st.text(min_size=32).filter(lambda s: "\x00" not in s and s.encode() != KEY)


@given(st.text(), st.text(min_size=1), OTHER_SECRETS)
def test_a_signed_cursor_is_refused_elsewhere(key: str, other_scope: str, other: str) -> None:
    signed = PageCursor(KEY, "list", None).next(encode_cursor(key))
    assert signed is not None
    for secret, scope in ((KEY, "list" + other_scope), (other.encode(), "list")):
        with pytest.raises(InvalidRequest) as raised:
            PageCursor(secret, scope, signed)
        assert raised.value.code is ErrorCode.INVALID_CURSOR


@given(st.text())
def test_anything_but_a_signed_cursor_is_refused(cursor: str) -> None:
    signed = PageCursor(KEY, "list", None).next(encode_cursor("doc_1"))
    if cursor != signed:
        with pytest.raises(InvalidRequest) as raised:
            PageCursor(KEY, "list", cursor)
        assert raised.value.code is ErrorCode.INVALID_CURSOR
