"""``ledger.core.redact``: no secret of a connection string survives, in any
form it can be written in, alone or inside a message (the end-to-end paths:
tests/storage/postgres/test_secrets.py)."""

from __future__ import annotations

from urllib.parse import quote, unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.core.redact import MASK, redact

SECRET = "hunter2SECRET"
HOST = "host=%2Ftmp%2Fpg"


@pytest.mark.parametrize("url", [
    f"postgresql://reader:{SECRET}@/postgres?{HOST}",
    f"postgres://reader:{SECRET}@db.example:5432/x",
    f"postgresql://reader@/postgres?{HOST}&password={SECRET}",
    f"postgresql://reader@/postgres?password={SECRET}&{HOST}",
    f"postgresql://reader@/postgres?{HOST}&sslpassword={SECRET}&sslkey=/k.pem",
    f"postgresql://reader@/postgres?{HOST}&options=-c%20statement_timeout%3D{SECRET}",
    f"postgresql://reader@/postgres?{HOST}&options=-c statement_timeout={SECRET}",
    f"postgresql://reader@/postgres?{HOST}&pass%77ord={SECRET}",  # an encoded key
    f"postgresql://reader@/postgres?{HOST}&pasword={SECRET}",  # a typo fails closed
    f"postgresql://reader@/postgres?{HOST}&{SECRET}",
    f"postgresql://reader:{SECRET}@[::1/postgres?{HOST}",  # malformed: no "]"
    f"postgresql://reader:{SECRET}?x@db/x",  # "?" inside the password
    f"postgresql://reader:{SECRET}@/x@db/x",  # "@" and "/" inside the password
    f"postgresql://reader@/postgres?{HOST}&password={SECRET[:4]}%zz{SECRET[4:]}",
])
def test_no_form_survives(url: str) -> None:
    alone = redact(url)
    assert SECRET not in alone and MASK in alone
    assert alone.startswith(url.split("://")[0] + "://")
    about = redact(f"Unavailable: {url}: cannot connect: invalid value for parameter "
                   f'"statement_timeout": "{echo(url)}", token "{url.rsplit("=", 1)[-1]}"', url)
    assert SECRET not in about and SECRET[:4] + "%zz" not in about
    if " " not in url:  # a URL inside a text ends at a space unless it is given
        # unknown to the caller, the URL inside a text is still found by its scheme
        assert SECRET not in redact(f"copying to {url} failed", "")


def echo(url: str) -> str:
    """What psycopg or the server could quote of ``url``: the whole secret
    value it holds (the password with its odd characters)."""
    if f"reader:{SECRET}" in url:
        return url.split("reader:", 1)[1].rsplit("@", 1)[0]
    if "%zz" in url:
        return url.rsplit("=", 1)[-1]
    return SECRET


def test_harmless_parts_are_kept() -> None:
    url = f"postgresql://reader:{SECRET}@db:5433/transcripts?{HOST}&sslmode=require" \
          "&application_name=agent&connect_timeout=5"
    assert redact(url) == (f"postgresql://reader:{MASK}@db:5433/transcripts?{HOST}"
                           "&sslmode=require&application_name=agent&connect_timeout=5")
    assert redact("/var/lib/tledger") == "/var/lib/tledger"
    assert redact("memory://shared") == "memory://shared"
    assert redact(redact(url)) == redact(url)


def test_keyword_form_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    text = f"dbname=x password={SECRET} sslpassword = '{SECRET} x' options=-cfoo={SECRET}"
    assert SECRET not in redact(text)
    monkeypatch.setenv("PGPASSWORD", "envSECRETpw")
    monkeypatch.setenv("PGOPTIONS", "-c search_path=envSECRETpath")
    out = redact('server says "envSECRETpw" and "envSECRETpath"')
    assert "envSECRET" not in out


@given(st.text(st.characters(codec="utf-8", exclude_characters="\n\r"),
               min_size=1, max_size=30))
def test_any_password_any_encoding(pw: str) -> None:
    secret = "Zq" + pw + "Zq"  # marked, so it cannot occur by chance in the rest
    encoded = quote(secret, safe="")
    for url, written in ((f"postgresql://u:{secret}@h/db", secret),
                         (f"postgresql://u:{encoded}@h/db", encoded),
                         (f"postgresql://u@h/db?password={encoded}", encoded),
                         (f"postgresql://u@h/db?sslmode=prefer&password={secret}", secret)):
        assert secret not in redact(url) and encoded not in redact(url), url
        for echoed in (written, unquote(written)):  # what psycopg could quote
            assert echoed not in redact(f"failed: {url}: echo {echoed}!", url), url
