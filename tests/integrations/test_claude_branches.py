"""Claude sessions kept in the ledger fork and resume at a message through the
Claude Agent SDK's own functions (extra ``claude``): ``query`` with
``resume_session_at`` and ``fork_session``, and ``fork_session_via_store``,
run by the real Claude Code CLI bundled with the SDK against a local stand-in
for the Messages API (``tests.helpers.fake_anthropic``: no network), with
``LedgerSessionStore`` as the session store. The model is sent only the
conversation up to the chosen message; the source session never changes;
and a manual reset (the privacy floor) is carried: nothing before it is
resumed or forked."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk", reason="the claude extra is not installed "
                    "(pip install 'transcript-ledger[claude]')")

from claude_agent_sdk import (
    ClaudeAgentOptions,
    ResultMessage,
    fork_session_via_store,
    get_session_messages_from_store,
    project_key_for_directory,
    query,
)

from ledger import Store
from ledger.integrations.claude import LedgerSessionStore, session_workspace
from tests.helpers.fake_anthropic import FakeAnthropic

CLI = Path(__import__("claude_agent_sdk").__file__).parent / "_bundled" / "claude"
pytestmark = pytest.mark.skipif(not CLI.exists(), reason="claude_agent_sdk ships no bundled "
                                "Claude Code CLI on this platform")


@pytest.fixture(params=["files", "memory", "postgres"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "files":
        return str(tmp_path / "ledger")
    if request.param == "memory":
        return f"memory://claude-{uuid.uuid4().hex}"
    return str(request.getfixturevalue("pg_root"))


@pytest.fixture
def fake() -> Iterator[FakeAnthropic]:
    server = FakeAnthropic()
    yield server
    server.close()


class Claude:
    """``query`` with the ledger as its session store, one prompt per call."""

    def __init__(self, tmp: Path, fake: FakeAnthropic, root: str) -> None:
        self.cwd = str(tmp / "project")
        Path(self.cwd).mkdir()
        self.config = tmp / "config"  # each query its own (another machine): the store
        self.calls = 0                  # is the only place a session is read from
        self.store = LedgerSessionStore(store=Store(root, durability="off"))
        self.fake = fake

    def ask(self, prompt: str, **options: Any) -> str:
        self.calls += 1
        config = self.config / str(self.calls)
        config.mkdir(parents=True)

        async def run() -> str:
            sid = None
            async for m in query(prompt=prompt, options=ClaudeAgentOptions(
                    cwd=self.cwd, session_store=self.store, env=self.fake.env(str(config)),
                    setting_sources=[], max_turns=1, tools=[], **options)):
                if isinstance(m, ResultMessage):
                    assert not m.is_error, m
                    sid = m.session_id
            assert sid is not None
            return sid
        return asyncio.run(run())

    def sent(self) -> list[str]:
        """The user prompts of the newest model request."""
        return self.fake.prompts(self.fake.requests[-1])

    def messages(self, sid: str) -> list[tuple[str, str]]:
        got = asyncio.run(get_session_messages_from_store(self.store, sid, self.cwd))
        out = []
        for m in got:
            content = m.message["content"]
            text = content if isinstance(content, str) else " ".join(
                b.get("text", "") for b in content if b.get("type") == "text")
            out.append((m.type, m.uuid, text))
        return [(kind, text) for kind, _uuid, text in out if "<system-reminder>" not in text]

    def uuid_of(self, sid: str, text: str) -> str:
        got = asyncio.run(get_session_messages_from_store(self.store, sid, self.cwd))
        for m in got:
            content = m.message["content"]
            if text in str(content):
                return str(m.uuid)
        raise AssertionError(f"{text!r} not in session {sid}")

    def load(self, sid: str) -> Any:
        key = {"project_key": project_key_for_directory(self.cwd), "session_id": sid}
        return asyncio.run(self.store.load(key))

    def history(self, sid: str) -> Any:
        key = {"project_key": project_key_for_directory(self.cwd), "session_id": sid}
        return self.store.store.history(session_workspace(key))


def test_resume_at_a_message_and_fork_through_the_sdk(tmp_path: Path, fake: FakeAnthropic,
                                                      root: str) -> None:
    claude = Claude(tmp_path, fake, root)
    sid = claude.ask("first question")
    assert claude.ask("second question", resume=sid) == sid
    assert claude.sent() == ["first question", "second question"]
    assert [t for _k, t in claude.messages(sid)] == [
        "first question", "answer to: first question",
        "second question", "answer to: second question"]
    source = claude.load(sid)
    first_answer = claude.uuid_of(sid, "answer to: first question")

    # the CLI resumes at the first answer, as a new session: the model never sees turn 2
    branch = claude.ask("third question", resume=sid, resume_session_at=first_answer,
                        fork_session=True)
    assert branch != sid
    assert claude.sent() == ["first question", "third question"]
    assert [t for _k, t in claude.messages(branch)] == [
        "first question", "answer to: first question",
        "third question", "answer to: third question"]
    assert claude.load(sid) == source  # the source session is untouched

    # the SDK's offline fork through the store, then resumed
    forked = asyncio.run(fork_session_via_store(claude.store, sid, claude.cwd,
                                                up_to_message_id=first_answer))
    assert claude.ask("fourth question", resume=forked.session_id) == forked.session_id
    assert claude.sent() == ["first question", "fourth question"]
    assert claude.load(sid) == source
    # each is a conversation for the ledger too
    assert "third question" in [r.parts[0]["text"] for r in claude.history(branch).provider_view()
                                if r.parts]


def test_a_manual_reset_is_carried_nothing_before_it_resumes_or_forks(
        tmp_path: Path, fake: FakeAnthropic, root: str) -> None:
    claude = Claude(tmp_path, fake, root)
    sid = claude.ask("my card number is 4111 1111")
    early = asyncio.run(fork_session_via_store(claude.store, sid, claude.cwd)).session_id
    claude.history(sid).clear_soft()  # the user's manual reset (tledger clear)
    assert claude.load(sid) == []
    assert claude.messages(sid) == []
    with pytest.raises(FileNotFoundError):  # nothing after the floor to fork
        asyncio.run(fork_session_via_store(claude.store, sid, claude.cwd))
    sent = len(fake.requests)
    with pytest.raises(Exception, match="No conversation found"):  # the CLI's own refusal
        claude.ask("a new start", resume=sid)
    assert "4111" not in str(fake.requests[sent:])
    # a fork taken before the reset is its own session: the reset does not reach it
    assert next(t for _k, t in claude.messages(early)) == "my card number is 4111 1111"
