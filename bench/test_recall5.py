"""The third-round recall harness (bench/recall5.py) and the REALTALK loader
on tiny inputs, so they cannot rot.

Run: ``python -m pytest bench/test_recall5.py -q`` (``bench/`` is outside
the suite's ``testpaths``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench import recall5, recall_data, recall_v2
from bench.recall_data import QuestionSet, Turn
from ledger.core import ranking


def _chat(tmp: Path) -> Path:
    """A REALTALK-shaped directory: one conversation of two sessions, and a
    decoy under ``locomo/`` that must never be read."""
    data = tmp / "data"
    (data / "locomo").mkdir(parents=True)
    conv = {
        "name": {"speaker_1": "Ana", "speaker_2": "Ben"},
        "session_1": [
            {"clean_text": "Hi Ben!", "speaker": "Ana", "date_time": "29.12.2023, 10:00:00",
             "dia_id": "D1:1"},
            {"clean_text": "I baked a lemon tart today", "speaker": "Ben",
             "date_time": "29.12.2023, 10:01:00", "dia_id": "D1:2",
             "blip_caption": "a tart on a plate"},
        ],
        "session_2": [
            {"clean_text": "", "speaker": "Ana", "date_time": "30.12.2023, 09:00:00",
             "dia_id": "D2:1"},
            {"clean_text": "We went skiing in Colorado", "speaker": "Ana",
             "date_time": "30.12.2023, 09:05:00", "dia_id": "D2:2"},
        ],
        "qa": [
            {"question": "What did Ben bake?", "evidence": ["D1:2"], "category": 1},
            {"question": "Where did Ana ski?", "evidence": ["D2:2", "D9:9"], "category": 2},
            {"question": "Who is Ana?", "evidence": ["D7:1"], "category": 3},
        ],
    }
    (data / "Chat_1_Ana_Ben.json").write_text(json.dumps(conv), "utf-8")
    (data / "locomo" / "Chat_1_Decoy.json").write_text("not json", "utf-8")
    return tmp


def test_realtalk_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REALTALK", str(_chat(tmp_path)))
    convs = recall_data.realtalk_conversations()
    assert convs is not None and len(convs) == 1
    c = convs[0]
    # sessions are windows; the empty message is dropped; the caption is appended
    assert [t.text for t in c.turns] == [
        "Hi Ben!", "I baked a lemon tart today [photo: a tart on a plate]",
        "We went skiing in Colorado"]
    assert len({t.window for t in c.turns}) == 2
    seq = {t.text.split()[0]: t.seq for t in c.turns}
    # evidence ids become seqs, unknown ids are dropped, a question with none is skipped
    assert c.questions == [("What did Ben bake?", {seq["I"]}),
                           ("Where did Ana ski?", {seq["We"]})]
    assert c.skipped == 1 and c.kinds == ["multi-hop", "temporal"]
    named = recall_data.realtalk_conversations(speakers=True)
    assert named is not None and named[0].turns[0].text == "Ana: Hi Ben!"
    whole = recall_data.realtalk()
    assert whole is not None and len(whole.questions) == 2


def test_realtalk_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REALTALK", raising=False)
    assert recall_data.realtalk_conversations() is None
    qs, why = recall_data.by_name("realtalk")
    assert qs is None and "REALTALK" in why


def _set() -> QuestionSet:
    texts = [
        ["Hi there, how was your day?", "I cooked pasta with peas for dinner.",
         "Sounds tasty, I love pasta."],
        ["Plans for the weekend?", "We are hiking near the canyon on Saturday.",
         "Take water, the canyon gets hot."],
        ["The pasta place downtown closed.", "Oh no, it was my favourite."],
    ]
    turns, seq = [], 1
    for w, rows in enumerate(texts):
        window = seq
        seq += 1
        for t in rows:
            turns.append(Turn(seq, window, "user", t, f"{29 + w}.12.2023, 10:00:00"))
            seq += 1
    return QuestionSet("mini", "test", turns, [("What did I cook for dinner?", {3})])


def test_weighted_scores_equal_lexical_with_unit_weights() -> None:
    ix = recall_v2.build_index(_set().turns)
    for q in ("pasta dinner", "hiking canyon Saturday", "favourite place"):
        floor = ("floor both", float(ranking.MIN_LENGTH))
        a = recall5.weighted_scores(ix, recall5.qweights(q), recall5.SHIPPED, None, floor)
        b = recall_v2.lexical_scores(ix, list(recall5.qweights(q)), recall5.SHIPPED)
        assert np.allclose(a, b)
        # without the floor (round 2) the short rows score otherwise
        raw = recall5.weighted_scores(ix, recall5.qweights(q), recall5.SHIPPED)
        assert not np.allclose(raw, b)
    # a term weighted 0 contributes nothing
    only_pasta = recall5.weighted_scores(ix, {"pasta": 1.0}, recall5.SHIPPED)
    zeroed = recall5.weighted_scores(ix, {"pasta": 1.0, "dinner": 0.0}, recall5.SHIPPED)
    assert np.allclose(only_pasta, zeroed)


def test_date_words_and_dated_variant() -> None:
    assert recall5.date_words("29.12.2023, 22:42:04") == (
        "29 December Dec 2023 Friday 29.12.2023")
    assert recall5.date_words("") == ""
    qs = _set()
    c = recall5.Ctx(qs, recall_v2.build_index(qs.turns))
    # only the dated index can place a question about "30 December" in window 2
    dated = recall5.v_dated(recall5.SHIPPED)(c)("What happened on 30 December?")
    plain = recall5.v_lex(recall5.SHIPPED)(c)("What happened on 30 December?")
    assert plain == []
    window = {t.seq: t.window for t in qs.turns}
    # every row says "December"; only window 5's rows say "30" as well
    assert [window[s] for s in dated[:3]] == [5, 5, 5]


def test_variants_rank_the_evidence() -> None:
    qs = _set()
    c = recall5.Ctx(qs, recall_v2.build_index(qs.turns),
                    recall_v2.build_index(qs.turns, (-2, -1, 1, 2)))
    q = "What did I cook for dinner?"
    for make in (recall5.v_lex(recall5.SHIPPED), recall5.v_session(recall5.SHIPPED, 0.3),
                 recall5.v_rm3(recall5.SHIPPED, 2, 5, 0.3),
                 recall5.v_hop(recall5.SHIPPED, 0.3),
                 recall5.v_split(recall5.SHIPPED, 0.5, 0.9),
                 recall5.v_bm25(recall5.SHIPPED, 0.9, 0.3)):
        assert make(c)(q)[0] == 3
    # names after the first word are weighted down, the first word is not a name
    w = recall5.name_weighted("Where did Ana ski with Ben's friends?", 0.25)
    assert w["ana"] == 0.25 and w["ben"] == 0.25 and w["ski"] == 1.0


def test_pooled_tally_and_report() -> None:
    qs = _set()
    total, kinds = recall5.run([qs, qs], None, quick=True, only={"**adopted**"})
    t = total[recall5.ADOPTED]
    assert t.n == 2 and t.cells() == "1.000 / 1.000 / 1.000"
    assert sum(x.n for x in total.values()) == 2  # the other variants were not run
    text = recall5.report("mini", [qs, qs], total, kinds)
    assert "2 questions" in text and "| **adopted**" in text
