"""`python -m proxy.mock`: serve the mock upstream on 127.0.0.1 (see the package's doc)."""

from __future__ import annotations

import argparse

import uvicorn

from . import canned
from .server import MockUpstream
from .voice import ECHO, PROSE


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m proxy.mock", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--canned", action="store_true", help="fixed answers, no validation")
    parser.add_argument("--prose", action="store_true", help="the demo's answers and summaries")
    parser.add_argument("--answer-delay", type=float, default=0.0, help="seconds per answer")
    parser.add_argument("--summary-delay", type=float, default=0.0, help="seconds per summary")
    args = parser.parse_args(argv)
    if args.canned:
        app = canned.app(args.answer_delay, args.summary_delay)
    else:
        app = MockUpstream(voice=PROSE if args.prose else ECHO, slow_s=args.answer_delay).app
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        http="httptools",
        log_level="warning",
        access_log=False,
        lifespan="on",
        backlog=4096,
    )


if __name__ == "__main__":
    main()
