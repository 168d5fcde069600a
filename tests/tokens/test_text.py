"""Text counts: equal to tiktoken's encode_ordinary where the text allows it,
never below it, linear-time chunking, and an honest ``exact`` flag."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ledger.tokens.counting as tokens
from ledger.tokens.counting import (
    CHUNK_CHARS,
    FORCE_CUT_SLACK,
    TextCounter,
    approx_tokens,
    count_text,
)
from ledger.tokens.encodings import get_encoding

ENCODINGS = ["o200k_base", "cl100k_base"]
REPO = Path(__file__).resolve().parents[2]


def true_count(encoding: str, text: str) -> int:
    return len(get_encoding(encoding).encode_ordinary(text))


def prose() -> str:
    shared = REPO.parent / "shared"
    docs = [shared / "seed" / "000_cce4e270632b8476.txt", shared / "DESIGN.md"]
    if all(path.is_file() for path in docs):
        return "\n".join(path.read_text(encoding="utf-8") for path in docs) * 2
    words = "the store keeps every row of a conversation and counts its tokens".split()
    rnd = random.Random(7)
    return " ".join(rnd.choice(words) for _ in range(20000)) + ".\n"


def code() -> str:
    """Real Python source: the token accounting modules, one after another."""
    paths = sorted((REPO / "ledger" / "tokens").glob("*.py"))
    return "\n".join(p.read_text(encoding="utf-8") for p in paths)


def json_text() -> str:
    rnd = random.Random(3)
    doc = [
        {
            "id": i,
            "name": f"item-{i}",
            "tags": ["a", "b", "ü"],
            "score": rnd.random(),
            "text": 'line one\nline "two"\t😀 ' * 3,
        }
        for i in range(800)
    ]
    return json.dumps(doc) + json.dumps(doc, indent=2, ensure_ascii=False)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("kind", ["prose", "code", "json"])
def test_equal_to_tiktoken_on_ordinary_text(encoding: str, kind: str) -> None:
    text = {"prose": prose, "code": code, "json": json_text}[kind]()
    assert len(text) > 4 * CHUNK_CHARS  # the chunked path, not one call
    counted = TextCounter(encoding).count(text)
    assert counted.tokens == true_count(encoding, text)
    assert counted.exact
    # and on short pieces of it, which go to tiktoken in one call
    for start in range(0, 5000, 997):
        piece = text[start : start + 300]
        assert TextCounter(encoding).count(piece).tokens == true_count(encoding, piece)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_equal_to_tiktoken_on_real_transcripts(encoding: str, real_transcripts: Path) -> None:
    files = sorted(real_transcripts.rglob("*.jsonl"))
    assert files
    counter = TextCounter(encoding)
    for path in files:
        text = path.read_text(encoding="utf-8")
        counted = counter.count(text)
        assert counted.tokens == true_count(encoding, text), path.name
        assert counted.exact, path.name


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_small_chunks_stay_exact_on_prose(encoding: str) -> None:
    text = prose()[:40000]
    counted = TextCounter(encoding, chunk_chars=96).count(text)
    assert counted.exact
    assert counted.tokens == true_count(encoding, text)


def test_special_token_text_is_ordinary_text() -> None:
    counted = count_text("<|endoftext|>")
    assert counted.tokens == true_count("o200k_base", "<|endoftext|>") > 1
    assert counted.exact and counted.encoding == "o200k_base"


ALPHABET = (
    " \t\n\r\x0b\x0c\x1c\x85\xa0\u2028\u3000"  # whitespace, and \x1c which is not
    "aAbZ'sStT0123456789!?.,/\\\"{}[]()-_+=*&^%$#@~`|<>;:"
    "\u0301éß中文😀\u200dǅʰⅫ٣\ufffdﬀİ"
)


@st.composite
def runs(draw: st.DrawFn) -> str:
    """Text made of runs of characters: the hard cases for piece boundaries."""
    chunks = draw(
        st.lists(
            st.tuples(st.sampled_from(ALPHABET), st.sampled_from([1, 1, 1, 2, 3, 9, 20])),
            min_size=1,
            max_size=30,
        )
    )
    return "".join(ch * n for ch, n in chunks)


@pytest.mark.parametrize("encoding", ENCODINGS)
@given(text=runs(), chunk=st.integers(min_value=1, max_value=24))
def test_never_below_tiktoken_and_exact_means_equal(encoding: str, text: str, chunk: int) -> None:
    counted = TextCounter(encoding, chunk_chars=chunk).count(text)
    truth = true_count(encoding, text)
    assert counted.tokens >= truth
    if counted.exact:
        assert counted.tokens == truth


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_force_cut_slack_is_sufficient(encoding: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Count with slack 0 and with a huge slack to learn the number of cuts,
    then check the real shortfall per cut never exceeds FORCE_CUT_SLACK."""
    rnd = random.Random(20240601)
    pools = [
        "abcdefghijklmnopqrstuvwxyz",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
        "aeiourstln",
        " \t",
        " \n",
        '!?.,/\\"{}[]()-_+=*&^%$#@~`|<>;:',
        "中文字日本語한국어",
        "😀👍🏽🎉",
        "éèêëàâäôöûüç\u0301",
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
    ]
    worst = 0.0
    cut_cases = 0
    for _ in range(600):
        pool = rnd.choice(pools)
        text = "".join(rnd.choice(pool) for _ in range(rnd.randint(2, 120)))
        counter = TextCounter(encoding, chunk_chars=rnd.randint(1, 16))
        monkeypatch.setattr(tokens, "FORCE_CUT_SLACK", 0)
        bare = counter.count(text)
        monkeypatch.setattr(tokens, "FORCE_CUT_SLACK", 10_000)
        cuts = (counter.count(text).tokens - bare.tokens) // 10_000
        truth = true_count(encoding, text)
        if cuts:
            cut_cases += 1
            worst = max(worst, (truth - bare.tokens) / cuts)
        else:
            assert bare.exact and bare.tokens == truth
    assert cut_cases > 300
    assert worst <= FORCE_CUT_SLACK


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_pathological_inputs_are_conservative(encoding: str) -> None:
    rnd = random.Random(5)
    counter = TextCounter(encoding)
    long_runs = {
        "one letter": "a" * 200_000,
        "upper": "Q" * 150_000,
        "spaces and tabs": " \t" * 100_000,
        "newlines": "\n" * 150_000,
        "punctuation": "!" * 150_000,
    }
    for label, text in long_runs.items():
        counted = counter.count(text)
        assert counted.tokens >= true_count(encoding, text), label
        assert not counted.exact, label  # a piece longer than CHUNK_CHARS was cut
    # base64 and random unicode have no long piece: still counted exactly
    b64 = base64.b64encode(rnd.randbytes(150_000)).decode()
    ranges = [(0x21, 0x2FF), (0x4E00, 0x9FFF), (0x1F300, 0x1F64F)]
    uni = "".join(chr(rnd.randint(*rnd.choice(ranges))) for _ in range(60_000))
    for label, text in {"base64": b64, "unicode": uni}.items():
        counted = counter.count(text)
        truth = true_count(encoding, text)
        assert counted.tokens >= truth, label
        assert counted.exact == (counted.tokens == truth), label


def test_huge_whitespace_run_does_not_reach_tiktoken_whole() -> None:
    """tiktoken's own regex overflows its stack on a ~1 MB whitespace run; the
    counter only ever hands it one chunk."""
    seen: list[int] = []
    counter = TextCounter("o200k_base")
    real = counter._encode
    counter._encode = lambda text: (seen.append(len(text)), real(text))[1]  # type: ignore[method-assign]
    counted = counter.count(" \t" * 600_000)
    assert not counted.exact and counted.tokens > 0
    assert max(seen) <= CHUNK_CHARS


def test_cuts_never_split_a_surrogate_pair() -> None:
    """A str holding UTF-16 surrogate pairs (as surrogatepass decoding makes) is
    fixed up like tiktoken does before any cut, so a cut cannot split a pair."""
    paired = "\ud83d\ude00" * 12_000  # one long piece: force-cut at odd offsets
    fixed = paired.encode("utf-16", "surrogatepass").decode("utf-16")
    assert fixed == "😀" * 12_000
    for chunk in (CHUNK_CHARS, 4097, 333):
        counter = TextCounter("o200k_base", chunk_chars=chunk)
        assert counter.count(paired) == counter.count(fixed)
        assert counter.count(paired).tokens >= true_count("o200k_base", fixed)


def test_approximation_is_cheap_and_never_exact() -> None:
    assert approx_tokens("abcd" * 10) == tokens.Count(10, False)
    assert approx_tokens("é") == tokens.Count(1, False)
    counted = count_text("a" * 4000, mode="approx")
    assert counted.tokens == 1000 and not counted.exact and counted.mode == "approx"


def test_approximation_loads_no_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(name: str) -> None:
        raise AssertionError("approx mode must not load an encoding")

    monkeypatch.setattr(tokens, "get_encoding", refuse)
    monkeypatch.setattr(tokens, "_counters", {})
    assert count_text("hello there", mode="approx").tokens == 3


def test_non_text_is_refused() -> None:
    with pytest.raises(tokens.TokenizerError):
        count_text(b"bytes")  # type: ignore[arg-type]
