"""`python -m bench.recall_eval [FILE]`: how often recall brings a question's evidence to the model.

Each conversation is replayed through the real proxy (in process, its
upstream a mock that answers with the transcript's next message and
summarises, a SQLite store), one full-history request per answer, as the app
sent them; then each question is asked at the end of the whole conversation,
each on a copy of the store as the replay left it, so no question sees
another. A question's evidence reached the model when the words its answer
needs are in what was forwarded (the verbatim window or the recall block).
Without FILE the development set (`bench.recall_set`) is used, and the four sets
written apart from the recall rules are reported below it; FILE holds one
conversation a line, as `Conversation.as_json` writes it. `--only SET` reports
one of the sets written apart alone, `--seed N` picks their seed.

Reported per configuration: questions with their evidence forwarded, questions
with at least one of their evidence turns forwarded, evidence turns forwarded,
tokens forwarded against the whole history, and false recalls (a recall block
for a question nothing in the conversation answers); for a replayed
configuration also the replay's own requests that got a recall block, and
those that extended the request before them as an exact prefix (what a
provider's prompt cache needs). A client that resends only its last messages
has its tokens counted against what it sent, and the rows its store archived
a message said.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import re
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from proxy.app import create_app
from proxy.config import load_settings
from proxy.english import SENTENCE
from proxy.mock import PROSE
from proxy.mock.chat import summary_of
from proxy.mock.embeddings import embedding_of
from proxy.settings import Settings
from proxy.tokens import offline_counter

from . import recall_wires
from .recall_score import Score
from .recall_set import Conversation, Question, dev_set
from .recall_sets import fifth_set, fourth_set, load, other_set, third_set
from .recall_variants import VARIANTS
from .recall_wires import WireUpstream

MODEL = "recall-eval"
SUMMARIZER = "context-proxy summarizer"


# Texts to their vectors: the mock's hashed words, or a model's (`bench.recall_vectors`).
Vectors = Callable[[Sequence[str]], list[list[float]]]


def _hashed(texts: Sequence[str]) -> list[list[float]]:
    return [embedding_of(t) for t in texts]


class Upstream:
    """Answers chat requests with `answer`, and summaries with the mock's.

    The replay sets `answer` to the transcript's next message, so the proxy
    stores the answer the app then resends, as with a real upstream.
    """

    def __init__(self, vectors: Vectors | None = None) -> None:
        self.last: list[dict[str, Any]] = []
        self.answer = "ok"
        self.vectors = vectors or _hashed

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if request.url.path.endswith("/embeddings"):
            made = self.vectors(body["input"])
            vectors = [{"index": i, "embedding": v} for i, v in enumerate(made)]
            return httpx.Response(200, json={"data": vectors, "model": body["model"]})
        messages = body["messages"]
        if messages and SUMMARIZER in str(messages[0].get("content", "")):
            text = summary_of(messages, PROSE)
        else:
            self.last = messages
            text = self.answer
        choice = {"index": 0, "message": {"role": "assistant", "content": text}}
        return httpx.Response(200, json={"choices": [{**choice, "finish_reason": "stop"}]})


def evaluate(
    conversations: Sequence[Conversation],
    name: str,
    *,
    window: int = 4000,
    recall: bool = True,
    method: str = "lexical",
    k: int = 5,
    max_tokens: int = 1200,
    plain: bool = False,
    replay: bool = True,
    trim: int | None = None,
    wire: str = "chat",
    vectors: Vectors | None = None,
    min_similarity: float | None = None,
) -> Score:
    """Score one configuration; `plain` adds a plain BM25 top-`k` to the window (recall off).

    Without `replay` the proxy meets each conversation with its whole history
    at the question (an app that starts using it mid-conversation). With
    `trim` the app resends its instructions and only its last `trim` messages,
    and the score counts the rows the store archived. `wire`: the API the app
    speaks (`chat`, or one of `recall_wires.WIRES`). `vectors` answer the
    upstream's `/v1/embeddings` (the mock's hashed words without).
    """
    from starlette.testclient import TestClient

    score = Score(name, shares=[], recalled_falsely=[])
    with tempfile.TemporaryDirectory(prefix="recall-eval-") as tmp:
        for number, convo in enumerate(conversations):
            replayed = Path(tmp) / f"c{number}.db"
            headers = {"authorization": "Bearer sk-eval", "x-conversation-id": f"c{number}"}
            upstream = Upstream(vectors) if wire == "chat" else WireUpstream(wire)
            settings = _settings(replayed, window, recall, method, k, max_tokens, min_similarity)
            with TestClient(_app(settings, upstream), base_url="http://proxy.test") as client:
                before: list[dict[str, Any]] | None = None
                for i, message in enumerate(convo.messages if replay else ()):
                    if message["role"] == "assistant" and i:
                        upstream.answer, upstream.last = message["content"], []
                        sent = _window(convo.messages[:i], trim)
                        response = _send(client, wire, sent, headers)
                        if response.status_code != 200:
                            raise RuntimeError(f"replay request {i}: {response.text}")
                        _settled(client)
                        score.replayed += 1
                        score.fired += int(response.headers.get("x-context-recall", "0")) > 0
                        if before is not None:
                            score.followed += 1
                            score.extended += upstream.last[: len(before)] == before
                        before = upstream.last
            if trim is not None:
                score.said += len(convo.messages)
                score.archived += _rows(replayed)
            upstream.answer = "ok"
            for j, question in enumerate(convo.questions):
                copy = Path(tmp) / f"c{number}-q{j}.db"
                if replay:
                    shutil.copyfile(replayed, copy)
                settings = _settings(copy, window, recall, method, k, max_tokens, min_similarity)
                with TestClient(_app(settings, upstream), base_url="http://proxy.test") as client:
                    asked = [*convo.messages, {"role": "user", "content": question.text}]
                    response = _send(client, wire, _window(asked, trim), headers)
                extra = _plain_top(convo.messages, question.text, k) if plain else []
                forwarded = upstream.last
                seen = (
                    [str(m.get("content", "")) for m in forwarded[:-1]]
                    if wire == "chat"
                    else recall_wires.said(forwarded, question.text)
                )
                _score(score, question, convo.messages, seen, response, extra)
    return score


def _settled(client: Any) -> None:
    """Wait for the work the proxy left after its answer (embedding what it archived):
    the next request then finds the vectors whatever the machine's speed."""
    client.portal.call(client.app_state["ctx"].background.settled)


def _window(messages: list[dict[str, str]], trim: int | None) -> list[dict[str, str]]:
    """What an app resending only its last `trim` messages (and its instructions) sends."""
    if trim is None:
        return messages
    leading = [m for m in messages[:1] if m["role"] == "system"]
    return [*leading, *messages[len(leading) :][-trim:]]


def _rows(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        (count,) = db.execute("SELECT COUNT(*) FROM messages").fetchone()
    return int(count)


def _settings(
    path: Path,
    window: int,
    recall: bool,
    method: str,
    k: int,
    max_tokens: int,
    min_similarity: float | None = None,
) -> Settings:
    searched: dict[str, Any] = {"enabled": recall, "method": method, "k": k}
    searched["max_tokens"] = max_tokens
    if min_similarity is not None:
        searched["min_similarity"] = min_similarity
    return load_settings(
        None,
        env={},
        overrides={
            "upstream": {"base_url": "http://upstream.invalid/v1"},
            "anthropic": {"base_url": "http://upstream.invalid"},
            "store": {"backend": "sqlite", "path": str(path)},
            # Summaries made when the trigger is crossed, not prepared in the background:
            # what a request forwards then does not depend on how fast the machine is.
            "reduction": {"strategy": "summarize", "prepare_ratio": 0.0},
            "recall": searched,
            "models": {"windows": {MODEL: window}},
        },
    )


def _app(settings: Settings, upstream: Upstream | WireUpstream) -> Any:
    transport = upstream.transport if isinstance(upstream, WireUpstream) else None
    transport = transport or httpx.MockTransport(upstream)
    return create_app(settings, transport=transport, counter=offline_counter())


def _send(
    client: Any, wire: str, messages: list[dict[str, str]], headers: dict[str, str]
) -> httpx.Response:
    if wire != "chat":
        return recall_wires.send(client, wire, MODEL, messages, headers)
    body = {"model": MODEL, "messages": messages}
    response: httpx.Response = client.post("/v1/chat/completions", json=body, headers=headers)
    return response


def _score(
    score: Score,
    question: Question,
    said: list[dict[str, str]],
    forwarded: Sequence[str],
    response: httpx.Response,
    extra: Sequence[str] = (),
) -> None:
    recalled = int(response.headers.get("x-context-recall", "0")) or len(extra)
    if not question.evidence:
        score.unanswerable += 1
        score.false_recalls += recalled > 0
        if recalled:
            assert score.recalled_falsely is not None
            score.recalled_falsely.append(question.text)
        return
    score.answerable += 1
    seen = " ".join([*forwarded, *extra])
    reached = [_reached(said[i]["content"], question.answer, seen) for i in question.evidence]
    score.evidence_turns += len(reached)
    score.turns_found += sum(reached)
    score.with_turn += any(reached)
    if question.answer:
        score.found += all(word in seen for word in question.answer)
    else:  # a file without answer words: one evidence turn forwarded is enough
        score.found += any(reached)
    tokens_in = int(response.headers["x-context-tokens-in"])
    tokens_out = int(response.headers["x-context-tokens-out"])
    counter = offline_counter()
    tokens_out += sum(counter.count_message(MODEL, {"role": "user", "content": t}) for t in extra)
    assert score.shares is not None
    score.shares.append(tokens_out / tokens_in)


def _reached(text: str, answer: Sequence[str], seen: str) -> bool:
    """Whether an evidence turn reached the model: whole, or the sentence holding its answer.

    (A long message is quoted around its match, so a cut one counts when the
    sentence with every answer word is there.)
    """
    if text.strip() in seen:
        return True
    sentences = (m.group().strip() for m in SENTENCE.finditer(text))
    return bool(answer) and any(
        s in seen for s in sentences if s and all(word in s for word in answer)
    )


def _plain_top(messages: Sequence[dict[str, str]], question: str, k: int) -> list[str]:
    """The baseline the issue measured: FTS5 BM25 over single turns, every word, no floor."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(body, tokenize = 'porter unicode61')")
    db.executemany("INSERT INTO t (body) VALUES (?)", [(m["content"],) for m in messages])
    words = " OR ".join(f'"{w}"' for w in re.findall(r"\w+", question))
    if not words:
        return []
    rows = db.execute("SELECT body FROM t WHERE t MATCH ? ORDER BY rank LIMIT ?", (words, k))
    return [body for (body,) in rows]


SETS = ("dev", "apart", "third", "fourth", "fifth")
# How each set's rows are named: the development set's plainly, the others by the set.
TITLES = {
    "dev": "",
    "apart": "set written apart: ",
    "third": "third set, blind: ",
    "fourth": "fourth set, blind: ",
    "fifth": "fifth set, blind: ",
}
METHODS = ("lexical", "embeddings", "hybrid")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.recall_eval", description=__doc__)
    parser.add_argument("file", nargs="?", help="conversations, one JSON a line")
    parser.add_argument("--window", type=int, default=4000)
    parser.add_argument(
        "--only", default=",".join(SETS), help=f"the sets to report, of {','.join(SETS)}"
    )
    parser.add_argument(
        "--methods",
        help=f"report only these recall rows (of {','.join(METHODS)}) on each set, "
        "no baselines or variants",
    )
    parser.add_argument(
        "--embeddings-model",
        metavar="DIR",
        help="a sentence-transformers model directory: embeddings and hybrid rows with its "
        "vectors on each set (needs sentence-transformers; see docs/recall.md)",
    )
    parser.add_argument("--min-similarity", type=float, help="recall.min_similarity of those rows")
    parser.add_argument("--seed", type=int, default=0, help="the seed of the sets written apart")
    args = parser.parse_args(argv)
    only = args.only.split(",")
    if unknown := set(only) - set(SETS):
        parser.error(f"--only: no set {', '.join(sorted(unknown))}")
    methods = args.methods.split(",") if args.methods else None
    if methods and (unknown := set(methods) - set(METHODS)):
        parser.error(f"--methods: no method {', '.join(sorted(unknown))}")
    model = _model(args.embeddings_model, parser)
    if methods and model is None and set(methods) - {"lexical"}:
        parser.error("--methods embeddings or hybrid needs --embeddings-model")
    named: list[tuple[str, list[Conversation]]] = []
    if args.file:
        named.append(("", load(args.file)))
    else:
        named += [(TITLES[name], _made(name, args.seed)) for name in SETS if name in only]
    for title, conversations in named:
        if methods is None:
            _baselines(title, conversations, args.window, file=bool(args.file))
        for method in methods or (METHODS[1:] if model is not None else ()):
            if method == "lexical":
                print(evaluate(conversations, f"{title}lexical, k=5", window=args.window).line())
                continue
            assert model is not None
            row = f"{title}{method} ({model.name}), k=5"
            score = evaluate(
                conversations,
                row,
                window=args.window,
                method=method,
                vectors=model,
                min_similarity=args.min_similarity,
            )
            print(score.line())
    mocked = model is None and methods is None and (args.file or "dev" in only)
    if mocked and importlib.util.find_spec("numpy") is not None:
        # The mock's vectors are hashed words: lexical too, so these rows test the
        # plumbing and the fusion, not what a real embedding model would find.
        conversations = load(args.file) if args.file else dev_set()
        for method in ("embeddings", "hybrid"):
            name = f"{method} (mock vectors), k=5"
            print(evaluate(conversations, name, window=args.window, method=method).line())
    return 0


def _made(name: str, seed: int) -> list[Conversation]:
    """The six conversations of set `name`; `seed` moves the sets written apart (the
    development set's six are seeds 0 to 5 always)."""
    if name == "dev":
        return dev_set()
    made = {"apart": other_set, "third": third_set, "fourth": fourth_set, "fifth": fifth_set}
    return made[name](seed=seed)


def _model(directory: str | None, parser: argparse.ArgumentParser) -> Any:
    if directory is None:
        return None
    from .recall_vectors import ModelMissing, ModelVectors

    try:
        return ModelVectors(directory)
    except ModelMissing as exc:
        parser.error(str(exc))


def _baselines(title: str, conversations: list[Conversation], window: int, file: bool) -> None:
    """The window alone, plain BM25, lexical recall; on the development set (or a
    `file`) also met whole and trimmed by the client, and the development set's variants."""
    name = f"{title}window" if title else "window only"
    print(evaluate(conversations, name, window=window, recall=False).line())
    name = f"{'... ' if title else ''}plain BM25 top-5{'' if title else ', no floor'}"
    print(evaluate(conversations, name, window=window, recall=False, plain=True).line())
    name = f"{'... ' if title else ''}lexical recall, k=5"
    print(evaluate(conversations, name, window=window).line())
    if title:  # a set written apart
        return
    met = evaluate(conversations, "... history met whole", window=window, replay=False)
    print(met.line())
    trimmed = evaluate(conversations, "... client keeps 60 messages", window=window, trim=60)
    print(trimmed.line())
    for wire in recall_wires.WIRES:
        name = f"... through {recall_wires.NAMES[wire]}"
        print(evaluate(conversations, name, window=window, wire=wire).line())
    for variant, made in VARIANTS.items() if not file else ():
        changed = [made(seed) for seed in range(len(conversations))]
        print(evaluate(changed, f"... {variant}", window=window).line())


if __name__ == "__main__":
    raise SystemExit(main())
