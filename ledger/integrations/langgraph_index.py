"""The in-memory projection of one LangGraph thread's workspace (pure: no I/O).

A LangGraph thread is stored as rows of one workspace (see
:mod:`ledger.integrations.langgraph`): transcript message rows, and
bookkeeping records -- empty assistant records whose ``meta["langgraph"]``
holds a checkpoint, a task's writes, or a prune/run-deletion tombstone. This
module folds those rows, in log order, into what the saver asks about: the
checkpoints of each namespace, where each channel version's value is, the
pending writes of each checkpoint, which message row a message id was last
stored in. It is a projection of the log, rebuilt from the rows whenever the
epoch changes; nothing here is a second source of truth.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

__all__ = ["META_KEY", "CheckpointRec", "ObjectList", "ThreadIndex", "WriteRec", "kept_prefix"]

META_KEY = "langgraph"
MESSAGES_META = "langchain"  # the key LedgerChatMessageHistory keeps a message under


@dataclass
class CheckpointRec:
    """One stored checkpoint: its row, its parent, its run and the record."""

    seq: int
    ns: str
    id: str
    parent: str | None
    run_id: str | None
    rec: dict[str, Any]


@dataclass
class WriteRec:
    task_id: str
    channel: str
    typed: list[Any]  # [serde type, base64 bytes]
    task_path: str
    idx: int


@dataclass(frozen=True)
class ObjectList:
    """A message list as the first ``length`` items of ``items``, a list only
    the saver holds and only ever extends at its end (never reordered, never
    shortened below a length some ``ObjectList`` uses). The lists of a
    thread's consecutive checkpoints share one ``items``."""

    items: list[Any]
    length: int

    def copy(self) -> list[Any]:
        """A new list of the messages (what callers get: theirs to change)."""
        return self.items[: self.length]

    @property
    def at_tip(self) -> bool:
        """Whether nothing was added after this list's end: it can grow in place."""
        return len(self.items) == self.length

    def extended(self, value: list[Any], keep: int) -> ObjectList:
        """The list ``value``, whose first ``keep`` items equal this list's
        first ``keep`` (``kept_prefix``): this list grown in place by the
        rest when it keeps all of this list and nothing was added after it
        (cost: the new items), else a new list of its own (a copy)."""
        if keep == self.length and self.at_tip:
            self.items.extend(value[keep:])
            return ObjectList(self.items, len(value))
        items = list(value)
        return ObjectList(items, len(items))


def kept_prefix(base: ObjectList | None, value: list[Any]) -> int:
    """How many leading items of ``value`` equal ``base``'s (compared as
    ``list ==`` does: identity first, then ``==``). When ``value`` holds all
    of ``base`` and ``base`` sits at its list's tip, the new items are added
    to that list for the comparison and taken off again, so it is one
    C-level pass over two arrays of pointers: the messages themselves are not
    touched unless one differs (a copy, like a slice, would touch every one)."""
    if base is None:
        return 0
    n = min(base.length, len(value))
    items = base.items
    if n == base.length and base.at_tip:
        items.extend(value[n:])
        try:
            same = items == value
        finally:
            del items[n:]
    elif n == base.length:
        same = value[:n] == items[:n]
    else:
        same = value == items[:n]
    if same:
        return n
    return next((i for i in range(n) if value[i] != items[i]), n)


@dataclass
class ThreadIndex:
    """What the rows of one thread's workspace say, up to ``next_seq``."""

    epoch: int = -1
    next_seq: int = 1
    cps: dict[str, dict[str, CheckpointRec]] = field(default_factory=dict)
    by_seq: dict[int, CheckpointRec] = field(default_factory=dict)
    heads: dict[str, CheckpointRec | None] = field(default_factory=dict)
    hidden: set[tuple[str, str]] = field(default_factory=set)
    # (ns, channel, version) -> (row seq, blob entry)
    blobs: dict[tuple[str, str, str], tuple[int, dict[str, Any]]] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], WriteRec]] = field(default_factory=dict)
    messages: dict[int, dict[str, Any]] = field(default_factory=dict)  # seq -> message dict
    message_ids: dict[str, int] = field(default_factory=dict)  # message id -> newest seq
    # materialised message lists: seq of the record holding a descriptor -> message seqs
    lists: OrderedDict[tuple[int, str], tuple[int, ...]] = field(default_factory=OrderedDict)
    objects: dict[int, Any] = field(default_factory=dict)  # seq -> decoded message
    # the same lists as message objects (what the graph holds), most recent first
    # out, each as a prefix of a list the saver owns (``ObjectList``): a step
    # that only appends extends its parent's list in place, so remembering it
    # costs the new messages, not a copy of the thread
    object_lists: OrderedDict[tuple[int, str], ObjectList] = field(default_factory=OrderedDict)
    thread: str | None = None  # the thread id the first record names: the owner


    LIST_CACHE = 16

    # --- folding rows -------------------------------------------------------------

    def apply(self, seq: int, row: dict[str, Any]) -> None:
        """Fold one row (``to_dict()`` shape, or a caller row given its seq)."""
        self.next_seq = max(self.next_seq, seq + 1)
        if row.get("kind") == "fork":
            # ``copy_thread``'s fork: the rows before are the source thread's,
            # its ``copy`` record (next) names the owner
            self.thread = None
            return
        meta = row.get("meta")
        if not isinstance(meta, dict):
            return
        rec = meta.get(META_KEY)
        if isinstance(rec, dict):
            kind = rec.get("t")
            if kind == "copy" and isinstance(rec.get("thread"), str):
                self.thread = rec["thread"]
                return
            if self.thread is None and isinstance(rec.get("thread"), str):
                self.thread = rec["thread"]
            if kind == "cp":
                self._apply_checkpoint(seq, rec)
            elif kind == "w":
                self._apply_writes(rec)
            elif kind == "prune":
                self._apply_prune(rec)
            elif kind == "drop_runs":
                self._apply_drop_runs(rec)
            return
        kept = meta.get(MESSAGES_META)
        if isinstance(kept, dict) and row.get("kind", "message") == "message":
            self.messages[seq] = kept
            data = kept.get("data")
            mid = data.get("id") if isinstance(data, dict) else None
            if isinstance(mid, str) and mid:
                self.message_ids[mid] = seq

    def _apply_checkpoint(self, seq: int, rec: dict[str, Any]) -> None:
        ns = str(rec.get("ns", ""))
        cid = str(rec["id"])
        parent = rec.get("parent")
        run = rec.get("run")
        cp = CheckpointRec(
            seq, ns, cid, parent if isinstance(parent, str) else None,
            run if isinstance(run, str) else None, rec,
        )
        self.cps.setdefault(ns, {})[cid] = cp
        self.by_seq[seq] = cp
        self.hidden.discard((ns, cid))
        head = self.heads.get(ns)
        if head is None or cid >= head.id:
            self.heads[ns] = cp
        blobs = rec.get("blobs")
        if isinstance(blobs, dict):
            for channel, entry in blobs.items():
                if isinstance(entry, dict) and "v" in entry:
                    self.blobs[(ns, channel, str(entry["v"]))] = (seq, entry)

    def _apply_writes(self, rec: dict[str, Any]) -> None:
        key = (str(rec.get("ns", "")), str(rec.get("cp")))
        task = str(rec.get("task"))
        path = str(rec.get("path", ""))
        table = self.writes.setdefault(key, {})
        for idx, channel, ty, data in rec.get("w", []):
            inner = (task, int(idx))
            if inner[1] >= 0 and inner in table:
                continue  # a retried task: its first writes stand
            table[inner] = WriteRec(task, channel, [ty, data], path, int(idx))

    def _apply_prune(self, rec: dict[str, Any]) -> None:
        keep = rec.get("keep") or {}
        for ns, table in self.cps.items():
            for cid in table:
                if keep.get(ns) != cid:
                    self.hidden.add((ns, cid))
            self._recompute_head(ns)

    def _apply_drop_runs(self, rec: dict[str, Any]) -> None:
        runs = set(rec.get("runs") or [])
        for ns, table in self.cps.items():
            for cid, cp in table.items():
                if cp.run_id is not None and cp.run_id in runs:
                    self.hidden.add((ns, cid))
            self._recompute_head(ns)

    def _recompute_head(self, ns: str) -> None:
        best: CheckpointRec | None = None
        for cid, cp in self.cps.get(ns, {}).items():
            if (ns, cid) not in self.hidden and (best is None or cid > best.id):
                best = cp
        self.heads[ns] = best

    # --- questions ----------------------------------------------------------------

    def visible(self, ns: str) -> list[CheckpointRec]:
        """The namespace's live checkpoints, newest (highest id) first."""
        table = self.cps.get(ns, {})
        return sorted(
            (cp for cid, cp in table.items() if (ns, cid) not in self.hidden),
            key=lambda cp: cp.id, reverse=True,
        )

    def get(self, ns: str, cid: str) -> CheckpointRec | None:
        cp = self.cps.get(ns, {}).get(cid)
        if cp is None or (ns, cid) in self.hidden:
            return None
        return cp

    def head(self, ns: str) -> CheckpointRec | None:
        """The newest live checkpoint of ``ns`` (LangGraph's "latest")."""
        return self.heads.get(ns)

    def namespaces(self) -> list[str]:
        return sorted(self.cps)

    def has_checkpoints(self) -> bool:
        return any(self.visible(ns) for ns in self.cps)

    def message_list(self, seq: int, channel: str) -> tuple[int, ...]:
        """The message row seqs of the message list whose descriptor is in
        the record at ``seq`` under ``channel`` (following ``base`` links
        back to a cached list or the first descriptor)."""
        chain: list[dict[str, Any]] = []
        key = (seq, channel)
        base: tuple[int, ...] = ()
        while True:
            cached = self.lists.get(key)
            if cached is not None:
                self.lists.move_to_end(key)
                base = cached
                break
            desc = self._descriptor(*key)
            chain.append(desc)
            link = desc.get("base")
            if link is None:
                break
            key = (int(link), channel)
        seqs = list(base)
        for desc in reversed(chain):  # in place: an append-only step costs its delta
            del seqs[int(desc.get("keep", 0)):]
            seqs.extend(int(s) for s in desc.get("add", []))
        out = tuple(seqs)
        self.remember(seq, channel, out)
        return out

    def remember(self, seq: int, channel: str, seqs: tuple[int, ...]) -> None:
        self.lists[(seq, channel)] = seqs
        self.lists.move_to_end((seq, channel))
        while len(self.lists) > self.LIST_CACHE:
            self.lists.popitem(last=False)

    def remember_objects(self, seq: int, channel: str, objects: ObjectList) -> None:
        self.object_lists[(seq, channel)] = objects
        self.object_lists.move_to_end((seq, channel))
        while len(self.object_lists) > self.LIST_CACHE:
            self.object_lists.popitem(last=False)

    def cached_objects(self, seq: int, channel: str) -> ObjectList | None:
        found = self.object_lists.get((seq, channel))
        if found is not None:
            self.object_lists.move_to_end((seq, channel))
        return found

    def _descriptor(self, seq: int, channel: str) -> dict[str, Any]:
        cp = self.by_seq.get(seq)
        entry = cp.rec.get("blobs", {}).get(channel) if cp is not None else None
        if isinstance(entry, dict) and isinstance(entry.get("m"), dict):
            return entry["m"]
        raise KeyError(f"no message list for {channel!r} in the record at seq {seq}")
