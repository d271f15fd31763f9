"""Images and documents counted as Anthropic bills them, not as the length of their base64."""

from __future__ import annotations

import base64
import random
import struct
import zlib
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy import media
from proxy.tokens import IMAGE_TOKENS_HIGH, IMAGE_TOKENS_LOW, TokenCounter

MODEL = "claude-sonnet-4-5"


def noise(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def png(width: int, height: int, size: int = 0) -> bytes:
    fields = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + fields))
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + fields + crc
    return head + noise(max(0, size - len(head)))


def jpeg(width: int, height: int, metadata: int = 0) -> bytes:
    """SOI, an APP1 segment of `metadata` bytes (EXIF, an ICC profile), then the frame."""
    app1 = b"\xff\xe1" + struct.pack(">H", metadata + 2) + noise(metadata)
    sof = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app1 + sof + noise(1000)


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + noise(200)


def webp(width: int, height: int, chunk: str) -> bytes:
    if chunk == "VP8X":
        body = b"\x00" * 4 + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    elif chunk == "VP8L":
        bits = (width - 1) | (height - 1) << 14
        body = b"\x2f" + bits.to_bytes(4, "little")
    else:
        body = b"\x00" * 3 + b"\x9d\x01\x2a" + struct.pack("<HH", width, height)
    data = chunk.encode() + struct.pack("<I", len(body)) + body + noise(300)
    return b"RIFF" + struct.pack("<I", len(data) + 4) + b"WEBP" + data


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def image(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": b64(data)},
    }


def user(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(blocks)}


def tokens_of(*blocks: dict[str, Any]) -> int:
    counter = TokenCounter()
    return counter.count_message(MODEL, user(*blocks)) - counter.count_message(MODEL, user())


def pdf(pages: int, size: int = 0, *, in_object_stream: bool = False) -> bytes:
    objects = b"".join(
        b"%d 0 obj << /Type /Page /Parent 2 0 R >> endobj\n" % (i + 3) for i in range(pages)
    )
    tree = b"2 0 obj << /Type /Pages /Count %d >> endobj\n" % pages
    if in_object_stream:
        packed = zlib.compress(objects)
        objects = b"1 0 obj << /Type /ObjStm /N %d /Filter /FlateDecode /Length %d >>\nstream\n" % (
            pages,
            len(packed),
        )
        objects += packed + b"\nendstream endobj\n"
    body = b"%PDF-1.7\n" + tree + objects
    return body + noise(max(0, size - len(body)))


def test_every_header_gives_the_images_size() -> None:
    assert media.dimensions(b64(png(1280, 800))) == (1280, 800)
    assert media.dimensions(b64(gif(320, 240))) == (320, 240)
    assert media.dimensions(b64(jpeg(4032, 3024, metadata=60_000))) == (4032, 3024)
    for chunk in ("VP8X", "VP8L", "VP8 "):
        assert media.dimensions(b64(webp(640, 480, chunk))) == (640, 480), chunk
    assert media.dimensions(b64(b"not an image at all")) is None
    assert media.dimensions("%%%not base64") is None


def test_an_image_costs_its_area_once_scaled_to_anthropics_limits() -> None:
    assert media.image_tokens(200, 200) == 54  # Anthropic's table: ~54
    assert media.image_tokens(1000, 1000) == 1334  # ~1334
    assert media.image_tokens(1092, 1092) == 1590  # ~1590
    # A long strip is scaled to 1568 px on its long edge first.
    assert media.image_tokens(4000, 500) == media.image_tokens(1568, 196)
    assert media.image_tokens(6000, 4000) <= media.IMAGE_TOKENS_MAX


def test_screenshots_count_about_1600_tokens_however_large_the_file() -> None:
    """A 100 KB PNG counted 34,169 tokens, a 450 KB one 153,636, a 1.5 MB one 512,036."""
    for width, height, size in [
        (1280, 800, 100_000),
        (1920, 1080, 450_000),
        (3000, 2000, 1_500_000),
    ]:
        counted = tokens_of(image(png(width, height, size)))
        assert counted == media.image_tokens(width, height) <= media.IMAGE_TOKENS_MAX, size
    url = {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}
    assert tokens_of(url) == media.IMAGE_TOKENS_MAX
    unreadable = {"type": "image", "source": {"type": "base64", "data": b64(noise(200_000))}}
    assert tokens_of(unreadable) == media.IMAGE_TOKENS_MAX


def test_a_screenshot_inside_a_tool_result_counts_as_an_image() -> None:
    shot = image(png(1280, 800, 200_000))
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [shot]}
    assert media.image_tokens(1280, 800) < tokens_of(result) < media.image_tokens(1280, 800) + 20
    text = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12 files"}
    assert 0 < tokens_of(text) < 20


def test_a_pdf_counts_a_page_figure_per_page() -> None:
    def document(data: bytes) -> dict[str, Any]:
        source = {"type": "base64", "media_type": "application/pdf", "data": b64(data)}
        return {"type": "document", "source": source}

    per_page = media.PDF_TOKENS_PER_PAGE
    # 1.5 MB of PDF was 512,036 tokens, more than the window.
    assert tokens_of(document(pdf(12, size=1_500_000))) == 12 * per_page
    assert tokens_of(document(pdf(7, size=200_000, in_object_stream=True))) == 7 * per_page
    # Pages that cannot be found: a page per 50 KB, within Anthropic's 100 pages.
    assert tokens_of(document(b"%PDF-1.7\n" + noise(1_499_000))) == 30 * per_page
    assert tokens_of(document(b"%PDF-1.7\n" + noise(20_000_000))) == 100 * per_page
    text = {"type": "document", "source": {"type": "text", "data": "The lease runs to 2031."}}
    assert 0 < tokens_of(text) < 20
    titled = {**text, "title": "Lease agreement, " * 20}
    assert tokens_of(titled) > tokens_of(text) + 40
    nested = {"type": "document", "source": {"type": "content", "content": [image(png(200, 200))]}}
    assert tokens_of(nested) == 54
    remote = {"type": "document", "source": {"type": "url", "url": "https://example.com/a.pdf"}}
    assert tokens_of(remote) == media.UNSEEN_PDF_PAGES * per_page


def test_what_a_server_tool_returns_counts_as_itself() -> None:
    """A PDF that web fetch read and a screenshot an MCP tool returned sit inside their
    result blocks; counted by the size of their base64, one such block would be more
    than a 200k window."""
    source = {"type": "base64", "media_type": "application/pdf", "data": b64(pdf(3, 1_500_000))}
    page = {"type": "document", "source": source}
    fetched = {"type": "web_fetch_result", "url": "https://example.com/a.pdf", "content": page}
    result = {"type": "web_fetch_tool_result", "tool_use_id": "srvtoolu_1", "content": fetched}
    assert tokens_of(page) < tokens_of(result) < tokens_of(page) + 60
    shot = image(png(1920, 1080, 2_000_000))
    mcp = {"type": "mcp_tool_result", "tool_use_id": "mcptoolu_1", "content": [shot]}
    assert tokens_of(shot) < tokens_of(mcp) < tokens_of(shot) + 20


def test_openai_image_parts_count_as_before() -> None:
    counter = TokenCounter()
    empty = counter.count_message("gpt-4o", user())
    high = user(
        {
            "type": "image_url",
            "image_url": {"url": "data:image/png;base64," + b64(png(4000, 4000, 50_000))},
        }
    )
    low = user({"type": "input_image", "image_url": "https://x/a.png", "detail": "low"})
    assert counter.count_message("gpt-4o", high) - empty == IMAGE_TOKENS_HIGH
    assert counter.count_message("gpt-4o", low) - empty == IMAGE_TOKENS_LOW


@given(st.integers(1, 30_000), st.integers(1, 30_000))
def test_image_tokens_stay_within_anthropics_bound_and_match_the_formula_below_it(
    width: int, height: int
) -> None:
    tokens = media.image_tokens(width, height)
    assert 1 <= tokens <= media.IMAGE_TOKENS_MAX
    fits = max(width, height) <= media.MAX_LONG_EDGE and width * height <= 1_150_000
    if fits:
        assert tokens == -(-width * height // media.PIXELS_PER_TOKEN)


@given(
    st.sampled_from(["png", "gif", "jpeg", "VP8X", "VP8L", "VP8 "]),
    st.integers(1, 16_383),
    st.integers(1, 16_383),
    st.integers(0, 70_000),
)
def test_an_image_counts_by_its_size_never_by_its_bytes(
    kind: str, width: int, height: int, metadata: int
) -> None:
    if kind == "png":
        data = png(width, height, 100 + metadata)
    elif kind == "gif":
        data = gif(width, height)
    elif kind == "jpeg":
        data = jpeg(width, height, metadata=min(metadata, 65_000))
    else:
        data = webp(width, height, kind)
    assert media.dimensions(b64(data)) == (width, height)
    assert tokens_of(image(data)) == media.image_tokens(width, height)


@given(
    st.sampled_from(
        [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"GIF89a", b"RIFF\x00\x00\x00\x00WEBPVP8 "]
    )
)
def test_an_image_cut_short_in_its_header_counts_the_most(head: bytes) -> None:
    for cut in range(len(head) + 4):
        data = base64.b64encode(head[:cut] + b"\x01" * (cut % 3)).decode()
        assert media.base64_image_tokens(data) <= media.IMAGE_TOKENS_MAX
