"""No secret of a connection string leaves the library (issue 30, case 1):
every form a PostgreSQL secret can take goes through ``repr(Store)``,
``stat().database``, the ``session_history`` error result the model reads,
the real ``tledger`` process's output and log records, and the secret is
looked for in all of them."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import pytest

from ledger import Store
from ledger.core.errors import InvalidRoot, Unavailable
from ledger.storage.postgres import connect
from tests.helpers import msg, subprocess_env

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
    return subprocess.run([sys.executable, "-m", "ledger.cli", "--root", root, *args],
                          capture_output=True, text=True, timeout=120, env=env)


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
        seen = [repr(store), repr(h.stat()), str(h.stat().database)]
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
    pg_root: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server quotes the ``options`` setting it refuses; psycopg_pool logs
    that text for each attempt, the error carries it, the CLI prints it."""
    url = f"{pg_root}&options={quote(f'-c statement_timeout={SECRET}', safe='')}"
    monkeypatch.setattr(connect, "OPEN_TIMEOUT", 1.0)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(Unavailable) as info:
        Store(url)
    pool_records = [r for r in caplog.records if r.name == "psycopg.pool"
                    and "statement_timeout" in r.getMessage()]
    assert pool_records, "psycopg_pool logged no failed attempt: nothing was tested"
    logging.getLogger("app").error("open failed", exc_info=info.value)
    assert SECRET not in caplog.text
    assert SECRET not in str(info.value) and "***" in str(info.value)

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
