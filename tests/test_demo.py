"""`context-proxy demo` and `inspect`: the offline demonstration runs end to end and cleans up."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from proxy.cli import main
from proxy.config import load_settings
from proxy.conversation import tenant_of
from proxy.demo_report import TurnRow, shown
from proxy.demo_script import TOOL_NAMES, run_tool, user_turn


def _row(turn: int, summaries: int = 0) -> TurnRow:
    return TurnRow(turn, 3, 1, 10, 10, 10, 10, ("none",), summaries, True, 0, 10)


def test_report_shows_first_last_every_tenth_and_summary_turns() -> None:
    rows = [_row(t, summaries=1 if t == 13 else 0) for t in range(1, 26)]
    assert [r.turn for r in shown(rows)] == [1, 10, 13, 20, 25]


def test_script_asks_for_a_tool_every_fourth_turn() -> None:
    assert "call tool" not in user_turn(3)
    assert f"call tool {TOOL_NAMES[0]}" in user_turn(4)
    assert run_tool("query_db", {"query": "x"}, 4) == run_tool("query_db", {"query": "x"}, 4)


@pytest.mark.integration
def test_demo_runs_offline_reduces_and_writes_an_svg_chart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chart = tmp_path / "demo.svg"
    threads_before = set(threading.enumerate())

    code = main(["demo", "--turns", "40", "--window", "4000", "--chart", str(chart)])

    out = capsys.readouterr().out
    assert code == 0
    assert "summarized" in out
    assert "reused" in out
    assert "tokens forwarded upstream" in out
    assert str(chart.resolve()) in out.replace("\n", "")
    root = ET.parse(chart).getroot()
    assert root.tag.endswith("svg")
    assert "forwarded by the proxy" in chart.read_text()
    # Both servers stopped (threads earlier tests left may end meanwhile).
    assert not set(threading.enumerate()) - threads_before


def test_demo_rejects_a_chart_path_that_is_not_svg(tmp_path: Path) -> None:
    assert main(["demo", "--turns", "1", "--chart", str(tmp_path / "c.png")]) == 2


def _stored_conversation(db: Path, said: str = "question {n} ") -> str:
    """Play a few turns through the real app into a SQLite store; return the conversation id.

    `said` opens each question, `{n}` its number."""
    import httpx

    from proxy.app import create_app
    from proxy.mock import MockUpstream
    from proxy.tokens import offline_counter

    mock = MockUpstream()
    settings = load_settings(
        None,
        env={},
        overrides={
            "upstream": {"base_url": "http://mock.test/v1"},
            "store": {"backend": "sqlite", "path": str(db)},
            "models": {"windows": {"tiny": 1000}},
        },
    )
    app = create_app(
        settings, transport=httpx.ASGITransport(app=mock.app), counter=offline_counter()
    )
    history = [{"role": "system", "content": "Be brief."}]
    with TestClient(app) as client:
        for n in range(1, 16):
            history.append({"role": "user", "content": said.format(n=n) + "detail " * 30})
            r = client.post(
                "/v1/chat/completions",
                json={"model": "tiny", "messages": history},
                headers={"authorization": "Bearer sk-inspect", "x-conversation-id": "conv-1"},
            )
            assert r.status_code == 200, r.text
            history.append(r.json()["choices"][0]["message"])
    return "conv-1"


def test_inspect_reads_a_local_sqlite_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "store.db"
    conv = _stored_conversation(db)

    code = main(["inspect", conv, "--key", "sk-inspect", "--db", str(db)])

    out = capsys.readouterr().out
    assert code == 0
    assert "conv-1" in out
    assert "Working history" in out and "Archive" in out
    assert "summary 1" in out
    assert "question 15" in out


def test_inspect_shows_brackets_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A message is text, never markup: "[/b]" once made inspect fail, and "[red]" vanished."""
    db = tmp_path / "store.db"
    conv = _stored_conversation(db, "question {n} [/b] in [red]bold[/red] ")

    code = main(["inspect", conv, "--key", "sk-inspect", "--db", str(db)])

    out = capsys.readouterr().out
    assert code == 0, out
    assert "question 15 [/b] in [red]bold[/red]" in out


def test_inspect_says_when_limit_cut_the_archive_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """31 archived messages read with --limit 10 are not reported as 10 archived."""
    db = tmp_path / "store.db"
    conv = _stored_conversation(db)

    assert main(["inspect", conv, "--key", "sk-inspect", "--db", str(db), "--limit", "10"]) == 0
    cut = " ".join(capsys.readouterr().out.split())
    assert main(["inspect", conv, "--key", "sk-inspect", "--db", str(db)]) == 0
    whole = " ".join(capsys.readouterr().out.split())

    assert "at least 10 archived (the first 10 shown: --limit)" in cut
    assert "Archive (the first 10 messages seen" in cut
    assert "31 archived" in whole and "at least" not in whole
    assert "Archive (every message seen" in whole


def test_inspect_explains_a_wrong_tenant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "store.db"
    conv = _stored_conversation(db)

    assert main(["inspect", conv, "--tenant", tenant_of("someone-else"), "--db", str(db)]) == 1
    assert "tenant" in capsys.readouterr().out


def _file_contents(db: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return list(conn.iterdump())


def test_inspect_never_expires_or_deletes_what_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A conversation idle for 40 days (the server's TTL may be 90) is shown and left as it was."""
    db = tmp_path / "store.db"
    conv = _stored_conversation(db)
    forty_days = 40 * 86400
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(
            "UPDATE conversations SET created_at = created_at - ?, updated_at = updated_at - ?",
            (forty_days, forty_days),
        )
        conn.commit()
    before = _file_contents(db)

    code = main(["inspect", conv, "--key", "sk-inspect", "--db", str(db), "--json"])

    assert code == 0, capsys.readouterr().out
    shown = json.loads(capsys.readouterr().out)
    assert shown["id"] == conv and len(shown["archive"]) == 31
    assert _file_contents(db) == before


def test_inspect_refuses_a_store_of_another_schema_and_leaves_it_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "store.db"
    conv = _stored_conversation(db)
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute("DELETE FROM _migrations WHERE name = 'schema-1'")
        conn.commit()
    before = _file_contents(db)

    assert main(["inspect", conv, "--key", "sk-inspect", "--db", str(db)]) == 1

    # What serve would say of it too: it cannot bring such a file up to date.
    said = " ".join(capsys.readouterr().out.split())
    assert "development build" in said and "move it aside" in said, said
    assert _file_contents(db) == before


def test_inspect_never_creates_a_missing_store(tmp_path: Path) -> None:
    assert main(["inspect", "x", "--db", str(tmp_path / "none.db")]) == 1
    assert not (tmp_path / "none.db").exists()


@pytest.mark.integration
def test_inspect_reads_through_the_admin_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from proxy.app import create_app
    from proxy.demo import serve_in_thread

    db = tmp_path / "store.db"
    conv = _stored_conversation(db)
    settings = load_settings(
        None,
        env={},
        overrides={
            "store": {"backend": "sqlite", "path": str(db)},
            "auth": {"admin_token": "admin-secret"},
        },
    )
    with serve_in_thread(create_app(settings), "proxy") as url:
        code = main(
            ["inspect", conv, "--key", "sk-inspect", "--url", url, "--admin-token", "admin-secret"]
        )
        denied = main(["inspect", conv, "--key", "sk-inspect", "--url", url, "--admin-token", "no"])
        out = capsys.readouterr().out
        # Without the key, the tenant is another's: the error says what to pass.
        keyless = main(["inspect", conv, "--url", url, "--admin-token", "admin-secret"])

    assert code == 0
    assert "summary 1" in out
    assert denied == 1
    assert keyless == 1
    assert "pass --key or --tenant" in " ".join(capsys.readouterr().out.split())


def test_inspect_shows_a_responses_conversation_with_its_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import httpx

    from proxy.app import create_app
    from proxy.mock import MockUpstream
    from proxy.tokens import offline_counter

    db = tmp_path / "store.db"
    settings = load_settings(
        env={
            "CONTEXT_PROXY_UPSTREAM_BASE_URL": "http://mock/v1",
            "CONTEXT_PROXY_STORE_PATH": str(db),
        }
    )
    mock = MockUpstream(counter=offline_counter())
    app = create_app(
        settings, transport=httpx.ASGITransport(app=mock.app), counter=offline_counter()
    )
    items: list[Any] = [{"role": "user", "content": "Please call tool lookup for Lyon."}]
    headers = {"authorization": "Bearer sk-inspect", "x-conversation-id": "resp-1"}
    with TestClient(app) as client:
        r = client.post("/v1/responses", json={"model": "m", "input": items}, headers=headers)
        items += r.json()["output"]
        items.append(
            {
                "type": "function_call_output",
                "call_id": items[-1]["call_id"],
                "output": "Sunny in Lyon.",
            }
        )
        r = client.post("/v1/responses", json={"model": "m", "input": items}, headers=headers)
        assert r.status_code == 200, r.text
    assert main(["inspect", "resp-1", "--key", "sk-inspect", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "function_call" in out and "lookup(" in out
    assert "function_call_output" in out and "Sunny in Lyon." in out
