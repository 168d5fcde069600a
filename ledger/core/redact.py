"""Hiding the secrets of PostgreSQL connection strings: the one function every
message, ``repr``, log record, CLI line and tool result that may hold a
connection string goes through.

What counts as a secret (libpq's parameters, https://www.postgresql.org/docs/
current/libpq-connect.html): the password of ``user:password@``; the value of
every query parameter that is not on the short list of parameters known to be
harmless (host, port, dbname, user, sslmode, file paths, timeouts, ...), so
``password``, ``sslpassword`` (the ``sslkey`` passphrase), ``options`` and any
misspelt or unknown parameter are hidden (fail closed: a typo such as
``pasword=`` hides its value too). libpq reads a ``passfile`` itself; nothing
here opens it. ``$PGPASSWORD``, ``$PGSSLPASSWORD`` and ``$PGOPTIONS`` are never
echoed: their values are hidden wherever they appear.

Beyond URL syntax, the texts psycopg and the server produce about a connection
can echo pieces of it (``invalid percent-encoded token: "pw%zz"``,
``invalid value for parameter "statement_timeout": "<part of options>"``): given
the connection string such a text is about, every secret value of it (as
written and percent-decoded, and each word of ``options``) is hidden wherever
it appears outside a URL. Pure: no I/O.
"""

from __future__ import annotations

import os
import re
from urllib.parse import unquote

__all__ = ["MASK", "redact"]

MASK = "***"

# libpq parameters whose values are not secret (shown in messages as given).
_SHOWN = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "passfile", "require_auth",
    "channel_binding", "connect_timeout", "client_encoding", "application_name",
    "fallback_application_name", "keepalives", "keepalives_idle", "keepalives_interval",
    "keepalives_count", "tcp_user_timeout", "replication", "gssencmode", "sslmode",
    "sslnegotiation", "requiressl", "sslcompression", "sslcert", "sslkey", "sslcertmode",
    "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer", "ssl_min_protocol_version",
    "ssl_max_protocol_version", "krbsrvname", "gsslib", "gssdelegation", "service",
    "target_session_attrs", "load_balance_hosts",
})
_SECRET_ENV = ("PGPASSWORD", "PGSSLPASSWORD", "PGOPTIONS")
_SCHEME = re.compile(r"postgres(?:ql)?://", re.IGNORECASE)
# A URL inside free text: up to whitespace, a quote or an angle bracket, less
# one trailing punctuation mark that ends the sentence around it.
_URL_IN_TEXT = re.compile(r"""postgres(?:ql)?://[^\s"'<>]*?(?=[:,;.)]?(?:[\s"'<>]|$))""",
                          re.IGNORECASE)
# key=value conninfo syntax (libpq's other form), as psycopg may print it.
_KEYWORD_SECRET = re.compile(
    r"""\b(password|sslpassword|options)(\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)""")


def redact(text: str, *connections: str) -> str:
    """``text`` with the secrets of every PostgreSQL connection string in it
    hidden; ``connections`` are the connection strings ``text`` may be about
    (others are ignored): their secret values are hidden wherever they appear.
    A connection string alone comes back as itself without its secrets, a
    malformed one too."""
    given = {c for c in connections if isinstance(c, str) and _SCHEME.match(c)}
    if _SCHEME.match(text) and ": " not in text and "\n" not in text:
        given.add(text)  # a connection string alone, spaces in options and all
    urls = sorted(given, key=len, reverse=True)
    values: set[str] = set()
    for url in urls:
        values |= _secret_values(url)
    for name in _SECRET_ENV:
        value = os.environ.get(name)
        if value:
            values.add(value)
            values |= _words(value)
    ordered = sorted(values, key=len, reverse=True)
    out: list[str] = []
    for piece, is_url in _split(text, urls):
        out.append(_redact_url(piece) if is_url else _scrub(piece, ordered))
    return "".join(out)


def _split(text: str, urls: list[str]) -> list[tuple[str, bool]]:
    """``text`` cut into (piece, is_url): the given URLs where they occur
    whole, then any other URL found by its scheme."""
    pieces: list[tuple[str, bool]] = [(text, False)]
    for url in urls:
        nxt: list[tuple[str, bool]] = []
        for piece, is_url in pieces:
            if is_url or url not in piece:
                nxt.append((piece, is_url))
                continue
            parts = piece.split(url)
            for i, part in enumerate(parts):
                if i:
                    nxt.append((url, True))
                if part:
                    nxt.append((part, False))
        pieces = nxt
    out: list[tuple[str, bool]] = []
    for piece, is_url in pieces:
        if is_url:
            out.append((piece, True))
            continue
        at = 0
        for m in _URL_IN_TEXT.finditer(piece):
            if m.start() > at:
                out.append((piece[at:m.start()], False))
            out.append((m.group(), True))
            at = m.end()
        if at < len(piece):
            out.append((piece[at:], False))
    return out


def _parts(url: str) -> tuple[str, str, str, str | None]:
    """(scheme and ``://``, userinfo, the rest before the query, the query or
    None) as
    libpq reads them, without failing on malformed input: the userinfo ends
    at the last ``@`` before the query, so an ``@``, ``/`` or ``:`` inside a
    password cannot make part of it look like a host."""
    m = _SCHEME.match(url)
    head = m.group() if m else ""
    rest = url[len(head):]
    body, sep, query = rest.partition("?")
    user, at, hostpart = body.rpartition("@")
    if not at and sep and "@" in query:
        # a "?" inside the password: an "@" before the first "=" or "&" of
        # the query ends the userinfo
        first = query.split("@", 1)[0]
        if "=" not in first and "&" not in first:
            user, at, hostpart = rest.rpartition("@")
            hostpart, sep, query = hostpart.partition("?")
    if not at:
        return head, "", body, query if sep else None
    return head, user + "@", hostpart, query if sep else None


def _redact_url(url: str) -> str:
    head, userinfo, hostpart, query = _parts(url)
    if userinfo:
        name, colon, _ = userinfo[:-1].partition(":")
        userinfo = f"{name}:{MASK}@" if colon else userinfo
    shown = head + userinfo + hostpart
    if query is None:
        return shown
    params = []
    for item in query.split("&"):
        key, eq, _ = item.partition("=")
        if _decoded(key) in _SHOWN:
            params.append(item if eq else key)
        elif eq:
            params.append(f"{key}={MASK}")
        else:
            params.append(MASK if item else item)
    return shown + "?" + "&".join(params)


def _secret_values(url: str) -> set[str]:
    """Every secret value of ``url``: as written, percent-decoded, and the
    words of each (an ``options`` value is several settings)."""
    _, userinfo, _, query = _parts(url)
    raw: list[str] = []
    if userinfo:
        _, colon, password = userinfo[:-1].partition(":")
        if colon and password:
            raw.append(password)
    for item in query.split("&") if query else ():
        key, eq, value = item.partition("=")
        if _decoded(key) not in _SHOWN:
            raw.append(value if eq else key)
    out: set[str] = set()
    for value in raw:
        for form in (value, _decoded(value)):
            if form:
                out.add(form)
                out |= _words(form)
    return out


def _words(value: str) -> set[str]:
    """The pieces of a value a server message may quote alone: the words of
    ``-c name=value -c ...`` and each side of their ``=``."""
    out: set[str] = set()
    for word in value.split():
        if word.startswith("-") and len(word) <= 2:
            continue  # the -c switch itself
        out.add(word)
        _, eq, setting = word.partition("=")
        if eq and setting:
            out.add(setting)
    return out


def _decoded(value: str) -> str:
    try:
        return unquote(value, errors="strict")
    except UnicodeDecodeError:
        return value


def _scrub(text: str, values: list[str]) -> str:
    text = _KEYWORD_SECRET.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text
