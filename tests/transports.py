"""httpx transports for tests that drive the app with respx instead of a served mock."""

from __future__ import annotations

import httpx
import respx


class FreshStreams(httpx.AsyncBaseTransport):
    """respx pre-reads mocked bodies; the proxy relays raw bytes, so hand it unread streams."""

    def __init__(self, router: respx.MockRouter) -> None:
        self.router = router

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await request.aread()
        mocked = await self.router.async_handler(request)
        return httpx.Response(
            mocked.status_code,
            headers=mocked.headers,
            stream=httpx.ByteStream(mocked.content),
            request=request,
        )
