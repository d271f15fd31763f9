"""What an image or a PDF costs in tokens, read from a few bytes of its base64 data.

Anthropic bills an image by its area once it is scaled to fit its limits
(about width * height / 750, at most about 1,600 tokens) and a PDF page by
page, whatever the size of the file. Counting their base64 text as words
made one screenshot tens of thousands of tokens and a large PDF more than
the whole window. The image's size is in its header, so only the bytes the
header needs are decoded; a PDF is decoded once and its page objects
counted. An image that cannot be read costs the most an image can; a PDF
whose pages cannot be found, a page per 50 KB.
"""

from __future__ import annotations

import binascii
import math
import re
import struct
import zlib

# Anthropic's vision documentation: tokens = width * height / 750, after an
# image whose long edge passes 1568 px, or which would cost more than about
# 1,600 tokens (~1.15 megapixels), is scaled down keeping its aspect ratio.
PIXELS_PER_TOKEN = 750
MAX_LONG_EDGE = 1568
IMAGE_TOKENS_MAX = 1600
# Anthropic's PDF documentation puts a page's text at 1,500 to 3,000 tokens and
# adds the page's image; the high end is used, so a document is seldom counted
# short (a count that falls short is a request the upstream rejects).
PDF_TOKENS_PER_PAGE = 3000
# A PDF whose page objects cannot be found (encrypted, or an unusual layout)
# counts a page per this many bytes, within Anthropic's 100 pages a request.
PDF_BYTES_PER_PAGE = 50_000
PDF_MAX_PAGES = 100
# A document the proxy never sees (a URL, a Files API id) counts this many pages.
UNSEEN_PDF_PAGES = 10
# A JPEG's size follows its metadata segments; walking more than this many is
# not a JPEG worth reading.
JPEG_SEGMENTS = 64
# Object streams hold the page objects of most PDFs written since 1.5; this
# much of them is inflated at most.
PDF_INFLATE_LIMIT = 8 << 20

_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")
_OBJECT_STREAM = re.compile(rb"/Type\s*/ObjStm\b")
_STREAM = re.compile(rb"stream\r?\n")


def image_tokens(width: int, height: int) -> int:
    """Tokens of an image of `width` x `height` pixels, as Anthropic scales and bills it."""
    if width <= 0 or height <= 0:
        return IMAGE_TOKENS_MAX
    scale = min(
        1.0,
        MAX_LONG_EDGE / max(width, height),
        math.sqrt(IMAGE_TOKENS_MAX * PIXELS_PER_TOKEN / (width * height)),
    )
    tokens = math.ceil(int(width * scale) * int(height * scale) / PIXELS_PER_TOKEN)
    return max(1, min(IMAGE_TOKENS_MAX, tokens))


def base64_image_tokens(data: str) -> int:
    """Tokens of a base64 image: by its dimensions when its header gives them, else the most."""
    size = dimensions(data)
    return IMAGE_TOKENS_MAX if size is None else image_tokens(*size)


def dimensions(data: str) -> tuple[int, int] | None:
    """Width and height from a PNG, GIF, WebP or JPEG header, decoding only the bytes read;
    None when no header says them (an image cut short counts the most)."""
    try:
        return _dimensions(data)
    except struct.error:
        return None


def _dimensions(data: str) -> tuple[int, int] | None:
    head = _decoded(data, 0, 32)
    if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
        width, height = struct.unpack(">II", head[16:24])
        return int(width), int(height)
    if head[:6] in (b"GIF87a", b"GIF89a"):
        width, height = struct.unpack("<HH", head[6:10])
        return int(width), int(height)
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return _webp(head)
    if head[:2] == b"\xff\xd8":
        return _jpeg(data)
    return None


def _webp(head: bytes) -> tuple[int, int] | None:
    chunk = head[12:16]
    if chunk == b"VP8X":
        width = int.from_bytes(head[24:27], "little") + 1
        height = int.from_bytes(head[27:30], "little") + 1
        return width, height
    if chunk == b"VP8L" and head[20:21] == b"\x2f":
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", head[26:30])
        return int(width) & 0x3FFF, int(height) & 0x3FFF
    return None


def _jpeg(data: str) -> tuple[int, int] | None:
    """The frame's size, from the SOF segment found by stepping over the segments before it."""
    offset = 2
    for _ in range(JPEG_SEGMENTS):
        marker = _decoded(data, offset, 9)
        if len(marker) < 4 or marker[0] != 0xFF:
            return None
        kind = marker[1]
        if kind == 0xFF:  # fill byte before a marker
            offset += 1
            continue
        length = int.from_bytes(marker[2:4], "big")
        # SOF0-SOF15, except DHT (C4), JPG (C8) and DAC (CC), carry the frame's size.
        if 0xC0 <= kind <= 0xCF and kind not in (0xC4, 0xC8, 0xCC):
            if len(marker) < 9:
                return None
            height, width = struct.unpack(">HH", marker[5:9])
            return int(width), int(height)
        if length < 2:
            return None
        offset += 2 + length
    return None


def _decoded(data: str, start: int, length: int) -> bytes:
    """Bytes `start` to `start + length` of base64 `data`, decoding only the groups holding them."""
    first = start // 3 * 4
    last = math.ceil((start + length) / 3) * 4
    try:
        block = binascii.a2b_base64(data[first:last])
    except (binascii.Error, ValueError):
        return b""
    skip = start - first // 4 * 3
    return block[skip : skip + length]


def pdf_tokens(data: str) -> int:
    """Tokens of a base64 PDF: a page's figure times its pages, found or bounded."""
    try:
        pdf = binascii.a2b_base64(data)
    except (binascii.Error, ValueError):
        pdf = b""
    pages = pdf_pages(pdf)
    if pages is None:
        pages = min(PDF_MAX_PAGES, max(1, math.ceil(len(pdf) / PDF_BYTES_PER_PAGE)))
    return pages * PDF_TOKENS_PER_PAGE


def pdf_pages(pdf: bytes) -> int | None:
    """The number of page objects, in the file or in its object streams; None if none is found."""
    if not pdf.startswith(b"%PDF"):
        return None
    pages = len(_PAGE.findall(pdf))
    if pages:
        return pages
    budget = PDF_INFLATE_LIMIT
    view = memoryview(pdf)
    for match in _OBJECT_STREAM.finditer(pdf):
        stream = _STREAM.search(pdf, match.end())
        if stream is None:
            break
        try:
            inflated = zlib.decompressobj().decompress(view[stream.end() :], budget)
        except zlib.error:
            continue
        budget -= len(inflated)
        pages += len(_PAGE.findall(inflated))
        if budget <= 0:
            break
    return pages or None
