"""HTML (.html, .htm, .xhtml): the text a reader sees, block by block (headings, paragraphs,
list items, table rows with their cells separated, ``alt`` text in its place), converted to
text and sent as text.

selectolax (the Lexbor engine, in C) parses as browsers do and decodes entities; script,
style, templates and hidden elements are never read. The encoding comes from a byte order
mark, else the declared ``charset=``, else the document's ``<meta>``, else UTF-8; but bytes
that are valid UTF-8 are read as UTF-8 when a ``<meta>`` names an encoding that reads them
otherwise (a page saved as UTF-8 keeps the ``<meta>`` it was written with). When a BOM or
UTF-8 wins over the ``<meta>`` so, the document carries the warning
``html_meta_charset_ignored``. Each block's locator is ``{"paragraph": n}``, the n-th block of
visible text in the page.
"""

from __future__ import annotations

import codecs
import re
from typing import TYPE_CHECKING, Any, ClassVar

from app.documents.kinds.base import DEFAULT_PARSE_OPTIONS, ParsedDocument, ParseOptions
from app.documents.kinds.converted import Block, ConvertedTextKind, no_text, text_document
from app.documents.kinds.text import bom_encoding, decode_text
from app.errors import InvalidDocument

if TYPE_CHECKING:
    from selectolax.lexbor import LexborNode

_SNIFF_BYTES = 1024
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
# The same, in the text of a page that a BOM says is UTF-16 or UTF-32.
_META_CHARSET_TEXT = re.compile(_META_CHARSET.pattern.decode("ascii"), re.I)
META_CHARSET_IGNORED = "html_meta_charset_ignored"
# What an HTML page starts with (after an XML declaration and comments, in XHTML).
_LOOKS_LIKE_HTML = re.compile(
    r"\A\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html)\b", re.I | re.S
)
_NEVER_READ = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "head",
        "svg",
        "math",
        "iframe",
        "object",
        "canvas",
        "select",
        "datalist",
    }
)
_BLOCKS = frozenset(
    {
        "address",
        "article",
        "aside",
        "blockquote",
        "body",
        "caption",
        "dd",
        "details",
        "dialog",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "legend",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "tbody",
        "tfoot",
        "thead",
        "tr",
        "ul",
    }
)
_CELLS = frozenset({"td", "th"})
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.I)
_CELL_SEPARATOR = " | "


def _hidden(node: LexborNode) -> bool:
    attributes = node.attributes
    if not attributes:
        return False
    if "hidden" in attributes or (attributes.get("aria-hidden") or "").lower() == "true":
        return True
    if (attributes.get("type") or "").lower() == "hidden":
        return True
    return bool(_HIDDEN_STYLE.search(attributes.get("style") or ""))


def _visible_blocks(root: LexborNode) -> list[Block]:
    """The visible text of ``root`` block by block, walked without recursion (pages nest
    deeply)."""
    blocks: list[Block] = []
    current: list[str] = []

    def flush() -> None:
        text = " ".join("".join(current).split())
        current.clear()
        if text:
            blocks.append((text, {"paragraph": len(blocks) + 1}))

    stack: list[tuple[LexborNode, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        tag = node.tag
        if leaving:
            if tag in _BLOCKS:
                flush()
            continue
        if tag == "-text":
            current.append(node.text_content or "")
            continue
        if tag in _NEVER_READ or tag in {"-comment", "!doctype"} or _hidden(node):
            continue
        if tag in _BLOCKS:
            flush()
        elif tag in _CELLS and "".join(current).strip():
            current.append(_CELL_SEPARATOR)
        elif tag == "br":
            current.append(" ")
        elif tag in {"img", "area"} or (tag == "input" and node.attributes.get("alt")):
            alt = (node.attributes.get("alt") or "").strip()
            if alt:
                current.append(f" {alt} ")
        stack.append((node, True))
        children = []
        child = node.child
        while child is not None:
            children.append(child)
            child = child.next
        stack.extend((child, False) for child in reversed(children))
    flush()
    return blocks


def _decode_page(data: bytes, declared: str | None) -> tuple[str, str, list[str]]:
    """The text of a page, the name of its encoding (as a ``charset=`` says it) and the
    warnings: a BOM's encoding, else the declared one, else the ``<meta>`` one unless the
    bytes are valid UTF-8 that it reads otherwise, else UTF-8."""
    if bom_encoding(data) is not None:
        text, encoding = decode_text(data, None)
        found = _META_CHARSET_TEXT.search(text, 0, _SNIFF_BYTES)
        if found and _family(found.group(1)) != _family(encoding):
            return text, encoding, [META_CHARSET_IGNORED]
        return text, encoding, []
    if declared:
        return (*decode_text(data, declared), [])
    found_bytes = _META_CHARSET.search(data[:_SNIFF_BYTES])
    if found_bytes is None:
        return (*decode_text(data, None), [])
    meta = found_bytes.group(1).decode("ascii")
    try:
        as_utf8, _ = decode_text(data, None)
    except InvalidDocument:
        return (*decode_text(data, meta), [])  # not UTF-8: as the page says, or refused
    if _family(meta) == "utf-8":
        return as_utf8, "utf-8", []
    try:
        as_meta, encoding = decode_text(data, meta)
    except InvalidDocument:  # an encoding Python does not know, or that these bytes are not
        return as_utf8, "utf-8", [META_CHARSET_IGNORED]
    if as_meta == as_utf8:  # ASCII, say: both read it alike, and the page keeps its word
        return as_meta, encoding, []
    return as_utf8, "utf-8", [META_CHARSET_IGNORED]


def _family(label: str) -> str | None:
    """An encoding's codec without its byte order (``utf-16`` for ``UTF-16LE``); None for a
    name Python does not know."""
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None
    return name.removesuffix("-le").removesuffix("-be")


class HtmlKind(ConvertedTextKind):
    name = "html"
    media_type = "text/html"
    hint_media_types = ("application/xhtml+xml",)
    extensions = (".html", ".htm", ".xhtml")
    trusts_declared_text = True
    content_schema: ClassVar[dict[str, Any]] = {"type": "string"}

    def recognises(self, data: bytes) -> bool:
        found = bom_encoding(data)
        encoding, skip = found if found is not None else ("latin-1", 0)
        head = data[skip : skip + _SNIFF_BYTES].decode(encoding, "ignore")
        return _LOOKS_LIKE_HTML.match(head) is not None

    def parse(self, data: bytes, options: ParseOptions = DEFAULT_PARSE_OPTIONS) -> ParsedDocument:
        from selectolax.lexbor import LexborHTMLParser  # when first needed: see LAZY_LIBRARIES

        text, encoding, warnings = _decode_page(data, options.charset)
        tree = LexborHTMLParser(text)
        root = tree.root
        if root is None:
            raise no_text("HTML page")
        parsed = text_document(_visible_blocks(root), "HTML page")
        parsed.warnings.extend(warnings)
        if encoding != "utf-8":
            parsed.media_type = f"{self.media_type}; charset={encoding}"
        return parsed
