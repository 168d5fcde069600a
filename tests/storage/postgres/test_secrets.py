"""No secret of a connection string leaves the library (issue 30, case 1):
every form a PostgreSQL secret can take goes through ``repr(Store)``,
``stat().database``, the ``session_history`` error result the model reads,
the real ``tledger`` process's output and log records, and the secret is
looked for in all of them."""

from __future__ import annotations

import json
import logging
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from ledger import Store
from ledger.core.errors import InvalidRoot, Unavailable
from ledger.storage.postgres import connect
from tests.helpers import cli_proc, msg, subprocess_env

psycopg = pytest.importorskip("psycopg", reason="the [postgres] extra is not installed")

SECRET = "hunter2SECRET"


def forms(root: str, tmp: Path) -> dict[str, str]:
    """Roots that connect (the test cluster trusts local users, so libpq
    sends the secrets and the server never needs them)."""
    passfile = tmp / "pgpass"
    passfile.write_text(f"*:*:*:*:{SECRET}pf\n")
    passfile.chmod(0o600)
    return {
        "userinfo": root.replace("postgres@", f"postgres:{SECRET}@", 1),
        "password": f"{root}&password={SECRET}",
        "sslpassword": f"{root}&sslpassword={SECRET}&sslmode=disable",
        "options": f"{root}&options={quote(f'-c application_name={SECRET}', safe='')}",
        "passfile": f"{root}&passfile={quote(str(passfile), safe='')}",
        "typo": f"{root}&password={SECRET}&application_name=x",
    }


def tl(root: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = subprocess_env()
    env["PGPASSWORD"] = SECRET + "env"
    return cli_proc.run_text(["--root", root, *args], timeout=120, env=env)


@pytest.mark.parametrize("form", ["userinfo", "password", "sslpassword", "options",
                                  "passfile", "typo"])
def test_a_working_root_never_shows_its_secret(
    pg_root: str, tmp_path: Path, form: str, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGPASSWORD", SECRET + "env")
    caplog.set_level(logging.DEBUG)
    url = forms(pg_root, tmp_path)[form]
    store = Store(url, durability="off")
    try:
        h = store.history("w1")
        h.append(msg("hello"))
        seen = [repr(store), repr(h.stat()), str(h.stat().detail.database)]
        assert "***" in seen[0] or form == "passfile"

        # the model's view of a failing read: history_unavailable, secret hidden
        with psycopg.connect(pg_root, autocommit=True) as conn:
            conn.execute("ALTER TABLE tl_rows RENAME TO tl_rows_gone")
        out = json.loads(h.session_history().call({"action": "list"}))
        assert out["error"]["code"] == "history_unavailable", out
        seen.append(json.dumps(out))
        with pytest.raises(Unavailable) as info:
            list(h.rows())
        logging.getLogger("app").error("read failed", exc_info=info.value)
        seen.append(str(info.value))
        with psycopg.connect(pg_root, autocommit=True) as conn:
            conn.execute("ALTER TABLE tl_rows_gone RENAME TO tl_rows")

        # the real CLI: a result that names the database, and errors
        stat = tl(url, "stat", "w1", "--json")
        assert stat.returncode == 0, stat.stderr
        missing = tl(url, "rows", "nosuchws")
        assert missing.returncode == 1 and "nosuchws" in missing.stderr
        seen += [stat.stdout, stat.stderr, missing.stdout, missing.stderr]
    finally:
        connect.close_pools(url)
    seen.append(caplog.text)
    for text in seen:
        assert SECRET not in text, (form, text)


def test_a_refused_connection_never_shows_its_secret(
    pg_root: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """The server quotes the ``options`` setting it refuses: the error carries
    that text at once (no pool retrying for its timeout), and psycopg_pool,
    which logs the text for each attempt of a pool on that URL, logs it with
    the secret hidden, as the CLI prints it."""
    url = f"{pg_root}&options={quote(f'-c statement_timeout={SECRET}', safe='')}"
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(Unavailable) as info:
        Store(url)
    assert time.monotonic() - started < connect.OPEN_TIMEOUT / 2  # the reason, not a wait
    assert "statement_timeout" in str(info.value)
    logging.getLogger("app").error("open failed", exc_info=info.value)
    assert SECRET not in str(info.value) and "***" in str(info.value)

    import psycopg_pool
    pool = psycopg_pool.ConnectionPool(url, min_size=1, open=False)
    with pytest.raises(psycopg_pool.PoolTimeout):
        pool.open(wait=True, timeout=1.0)
    pool.close()
    pool_records = [r for r in caplog.records if r.name == "psycopg.pool"
                    and "statement_timeout" in r.getMessage()]
    assert pool_records, "psycopg_pool logged no failed attempt: nothing was tested"
    assert SECRET not in caplog.text

    done = tl(url, "db", "status")  # psycopg.connect directly: the server's text
    assert done.returncode == 1 and "statement_timeout" in done.stderr, done.stderr
    assert SECRET not in done.stderr + done.stdout


@pytest.mark.parametrize("url", [
    f"postgresql://postgres@/postgres?host=%2Ftmp&password={SECRET[:4]}%zz{SECRET[4:]}",
    f"postgresql://postgres:{SECRET}@[::1/postgres?password={SECRET}",
    f"postgresql://postgres@/postgres?host=%2Ftmp&pasword={SECRET}",
])
def test_a_malformed_root_never_shows_its_secret(url: str) -> None:
    """psycopg's parse errors quote the bad token or the whole URL."""
    with pytest.raises(InvalidRoot) as info:
        Store(url)
    assert SECRET[4:] not in str(info.value)
    done = tl(url, "ls")
    assert done.returncode == 2 and "malformed PostgreSQL URL" in done.stderr, done.stderr
    assert SECRET[4:] not in done.stderr + done.stdout


# --- inputs (issue 30, case 9): a history that checks clean moves to PostgreSQL ---------


def test_a_history_with_every_storable_oddity_checks_clean_and_migrates(
    pg_root: str, tmp_path: Path,
) -> None:
    """NUL in every string of a row, control characters and non-ASCII in batch
    ids (all accepted on every engine) migrate byte for byte; the NUL batch id
    that used to check clean on files and fail on PostgreSQL is refused at
    append on files too (tests/contract/inputs.py)."""
    from ledger.core.errors import InvalidRow

    files = tmp_path / "files"
    h = Store(files, durability="off").history("odd")
    h.append({"role": "user", "id": "r\x00", "parts": [{"type": "text", "text": "a\x00b"}],
              "meta": {"k\x00": "\x00v"}, "extra\x00": ["\x00"]}, batch_id="b\x01\x1b[31m\u00e9")
    h.append({"role": "assistant", "parts": [
        {"type": "tool_call", "id": "c\x00", "name": "t\x00", "input": {"\x00": "\x00"}}]},
        batch_id="b\u2028\U0001f600")
    h.append({"role": "tool", "parts": [{"type": "tool_result", "id": "c\x00",
                                         "output": "o\x00" * 100}]})
    with pytest.raises(InvalidRow):
        h.append({"role": "user", "parts": []}, batch_id="b\x00")
    check = tl(str(files), "check", "odd")
    assert check.returncode == 0, check.stdout + check.stderr
    done = tl(str(files), "migrate", str(files), pg_root)
    assert done.returncode == 0, done.stderr
    try:
        pg = Store(pg_root).history("odd")
        assert [r.line for r in pg.rows()] == [r.line for r in h.rows()]
        assert tl(pg_root, "check", "odd").returncode == 0
    finally:
        connect.close_pools(pg_root)


def test_a_nul_batch_id_written_before_the_rule_is_refused_whole(pg_root: str) -> None:
    """A file history written by 0.2 may hold a batch id with a NUL (appends
    refuse it since): moving it to PostgreSQL (``load_rows``, what ``tledger
    migrate`` runs) says which batch and writes nothing, never a half copy."""
    from ledger.core.errors import LedgerError
    from ledger.core.format import rows as fmt
    from ledger.core.rows import Row

    def line(seq: int, bid: str) -> Row:
        data = {"seq": seq, "id": f"r{seq}", "kind": "message", "role": "user",
                "parts": [{"type": "text", "text": "x"}], "partial": False, "meta": {},
                "ts": 1, "batch": {"id": bid, "n": 1, "i": 0}}
        raw = fmt.frame(fmt.encode_json(data))
        decoded = fmt.decode_line(raw.rstrip(b"\n"))
        assert decoded is not None
        return Row(raw.rstrip(b"\n"), 1, 0, decoded)

    store = Store(pg_root)
    try:
        h = store.history("old")
        with pytest.raises(LedgerError, match=r"seq 2 .*NUL.*nothing was written"):
            h.engine.load_rows([line(1, "b-1"), line(2, "b\x00x"), line(3, "b-3")])
        assert not h.exists() and store.workspaces() == []
    finally:
        connect.close_pools(pg_root)
