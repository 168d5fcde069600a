"""LangGraph's checkpointer, stored in ledger workspaces (extra ``langgraph``).

``LedgerSaver(store=None, root=None)`` is a sync and async
``BaseCheckpointSaver``: ``get_tuple``, ``list`` (filter, ``before``,
``limit``), ``put``, ``put_writes``, ``delete_thread``, ``delete_for_runs``,
``copy_thread`` and ``prune``, and their ``a*`` twins. Each LangGraph thread
is one workspace, named by the thread id (or ``lg-<hash>`` when the id cannot
name a workspace or has an encoded name's form: ``thread_workspace``).

How a thread is stored (docs/how-to/langgraph.md):

- Everything is appended; nothing is rewritten. A ``put`` is one batch: the
  messages new to the thread, then the checkpoint record.
- The ``messages`` channel (``message_channels``) is stored as canonical
  transcript rows, one per message, exactly as ``LedgerChatMessageHistory``
  stores them, so ``session_history``, ``tledger show`` and every export read a
  LangGraph thread as a conversation. A checkpoint holds its message list as a
  delta against its parent's: how many leading messages it keeps and which
  message rows follow (``{"base", "keep", "add"}``). A message already stored
  (same id, same content) is referred to, never stored again, so storage grows
  with the thread's length, not with its square.
- Other channel values, the checkpoint itself, its metadata and the pending
  writes are serialised with the saver's ``serde`` into bookkeeping records:
  empty assistant records (never provider-visible, never returned by
  ``session_history``, hidden by ``tledger show``: ``meta.bookkeeping``) whose
  ``meta["langgraph"]`` holds them. Only channels
  in ``new_versions`` are written; others are found at the version stored
  earlier.
- Concurrent writers never fork a thread silently. A config that
  ``get_tuple``/``put`` returned for the newest checkpoint carries
  ``__ledger_head__: True``; a ``put`` under it is appended only while its
  parent is still the newest checkpoint of the namespace (a conditional append
  on the log's next seq, retried while other rows -- writes, other namespaces
  -- are all that changed). Otherwise it raises :class:`CheckpointConflict`.
  Starting a run from an older checkpoint (time travel) is a deliberate fork
  and is allowed. The first input checkpoint of a thread (``source="input"``,
  ``step=-1``, no parent) is refused when the thread already has one.
- ``copy_thread`` to a thread that has no workspace yet is a fork
  (``History.fork``): the source's rows are shared, not copied (hard links
  on files), so copying a long thread costs about what an empty one does;
  one ``copy`` record then names the new thread as the owner (the inherited
  records name the source). Copying into a thread that already has
  checkpoints appends renumbered copies of the source's rows, as before.
- ``prune`` and ``delete_for_runs`` append tombstone records (the pruned
  checkpoints disappear from ``get_tuple``/``list``; their bytes stay, as
  the log is append-only); ``prune(strategy="delete")`` and
  ``delete_thread`` delete the workspace.

Each saver keeps, per thread it touched, an in-memory projection of the rows
(:mod:`ledger.integrations.langgraph_index`), brought up to date from the rows
appended since (by anyone) before every call, and rebuilt when the epoch
changes (:mod:`ledger.integrations.langgraph_log`: the thread's lock,
``History`` and projection, and the conditional append). Message lists it
wrote or read are kept as the message objects themselves, so a turn does not
decode the whole thread again; LangGraph's
reducers treat messages as immutable, and so does the saver. Consecutive
checkpoints' lists are prefixes of one list the saver owns, so a ``put``
that appends costs its new messages plus one pointer comparison of the kept
prefix, not a copy of the thread; ``get_tuple`` hands out a copy.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import xxhash

from ledger.core.errors import InvalidWorkspace, LedgerError, WorkspaceNotFound
from ledger.core.ids import validate_session
from ledger.core.redact import redact
from ledger.integrations import open_store, require
from ledger.integrations.langgraph_index import (
    META_KEY,
    CheckpointRec,
    ObjectList,
    ThreadIndex,
    kept_prefix,
)
from ledger.integrations.langgraph_log import CheckpointConflict, ThreadLogs
from ledger.transcript.store import Store

require("langgraph.checkpoint.base", "langgraph")
from langchain_core.messages import BaseMessage, messages_from_dict  # noqa: E402
from langchain_core.runnables import RunnableConfig  # noqa: E402
from langgraph.checkpoint.base import (  # noqa: E402
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_metadata,
)

from ledger.integrations.langchain import message_row  # noqa: E402

__all__ = ["HEAD_KEY", "CheckpointConflict", "LedgerSaver", "thread_workspace"]

HEAD_KEY = "__ledger_head__"


def thread_workspace(thread_id: str) -> str:
    """The workspace of a LangGraph thread: the id itself when it can name a
    workspace and is not itself of an encoded form (``lg-<32 hex>``,
    ``cc-<16 hex>-...``: ``ledger.core.ids.ENCODED_RE``), else ``lg-`` and a
    128-bit hash of it. Kept ids and hashed ids never meet, so a thread id
    that is another thread's hashed name reaches only its own hashed name."""
    tid = str(thread_id)
    try:
        return validate_session(tid, "thread id")
    except InvalidWorkspace:
        return "lg-" + xxhash.xxh3_128_hexdigest(tid.encode("utf-8", "surrogatepass"))


def _own(idx: ThreadIndex, tid: str, ws: str) -> ThreadIndex:
    """``idx``, refused (``LedgerError``) when its rows are another thread's:
    a hashed workspace name is not proof of identity, the records' thread id
    is, so even colliding names never read, write or delete another thread."""
    if idx.thread is not None and idx.thread != tid:
        raise LedgerError(f"thread {tid!r}: workspace {ws!r} holds another thread's "
                          "checkpoints (its name collides); nothing was read or written")
    return idx


def _owning(tid: str, ws: str, build: Any) -> Any:
    """``build`` for ``ThreadLogs.append``, run only on the thread's own log."""
    def checked(idx: ThreadIndex) -> Any:
        return build(_own(idx, tid, ws))
    return checked


def _conf(config: RunnableConfig | None) -> dict[str, Any]:
    return dict((config or {}).get("configurable") or {})


def _need(conf: dict[str, Any], key: str, what: str) -> str:
    value = conf.get(key)
    if value is None or value == "":
        raise LedgerError(f"LedgerSaver.{what}: config['configurable'][{key!r}] is required")
    return str(value)


def _empty_record(rec: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "message", "role": "assistant", "parts": [],
            "meta": {"bookkeeping": True, META_KEY: rec}}


class LedgerSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer over a ledger store (module doc).

    ``store`` or ``root`` pick the store (default ``$TLEDGER_ROOT``, else
    ``./.tledger``). ``message_channels`` name the channels stored as
    transcript rows when their value is a list of messages.
    """

    def __init__(
        self,
        store: Store | None = None,
        root: str | os.PathLike[str] | None = None,
        *,
        serde: Any = None,
        message_channels: Sequence[str] = ("messages",),
    ) -> None:
        super().__init__(serde=serde)
        self.store = open_store(store, root)
        self.message_channels = frozenset(message_channels)
        self._logs = ThreadLogs(self.store)

    def __repr__(self) -> str:
        return f"LedgerSaver(root={redact(self.store.root)!r})"

    # --- encoding -------------------------------------------------------------------

    def _dump(self, value: Any) -> list[str]:
        ty, data = self.serde.dumps_typed(value)
        return [ty, base64.b64encode(data).decode("ascii")]

    def _load(self, typed: Sequence[Any]) -> Any:
        return self.serde.loads_typed((typed[0], base64.b64decode(typed[1])))

    def _message(self, idx: ThreadIndex, seq: int) -> BaseMessage:
        obj = idx.objects.get(seq)
        if obj is None:
            kept = idx.messages.get(seq)
            if kept is None:
                raise LedgerError(
                    f"a checkpoint refers to message row {seq}, which is no longer a message "
                    "(rejected, truncated or purged): that checkpoint's messages cannot be "
                    "restored; load an older checkpoint or a copy of the thread")
            obj = idx.objects[seq] = messages_from_dict([kept])[0]
        return obj

    def _list_objects(self, idx: ThreadIndex, seq: int, channel: str) -> ObjectList:
        """The message objects of the list described in the record at ``seq``."""
        cached = idx.cached_objects(seq, channel)
        if cached is None:
            objs = idx.objects
            items = [objs[s] if s in objs else self._message(idx, s)
                     for s in idx.message_list(seq, channel)]
            cached = ObjectList(items, len(items))
            idx.remember_objects(seq, channel, cached)
        return cached

    def _messages_entry(
        self, idx: ThreadIndex, ns: str, channel: str, value: list[Any],
        parent: CheckpointRec | None, first_seq: int, rows: list[dict[str, Any]],
    ) -> tuple[dict[str, Any], list[tuple[int, BaseMessage]], ObjectList | None, int] | None:
        """The delta descriptor of ``value`` against the parent's list (new
        message rows go to ``rows``, their seqs from ``first_seq``), the new
        messages, the parent's list and how much of it ``value`` keeps; None
        when ``value`` holds anything but messages. Costs one C-level pass
        over the kept prefix's pointers plus the new messages (``kept_prefix``):
        the parent's list comes from the projection's cache as the objects
        the graph holds."""
        base_seq: int | None = None
        base: ObjectList | None = None
        if parent is not None:
            version = parent.rec.get("cv", {}).get(channel)
            found = idx.blobs.get((ns, channel, str(version))) if version is not None else None
            if found is not None and "m" in found[1]:
                base_seq = found[0]
                base = self._list_objects(idx, base_seq, channel)
        keep = kept_prefix(base, value)
        tail = value[keep:]
        if not all(isinstance(m, BaseMessage) for m in tail):
            return None
        add: list[int] = []
        fresh: list[tuple[int, BaseMessage]] = []
        for message in tail:
            known = idx.message_ids.get(message.id) if message.id else None
            if known is not None and self._message(idx, known) == message:
                add.append(known)
                continue
            seq = first_seq + len(rows)
            rows.append(message_row(message))
            add.append(seq)
            fresh.append((seq, message))
        return {"base": base_seq, "keep": keep, "add": add}, fresh, base, keep

    # --- reads ----------------------------------------------------------------------

    def _tuple(self, ws: str, tid: str, idx: ThreadIndex, cp: CheckpointRec) -> CheckpointTuple:
        rec = cp.rec
        checkpoint: dict[str, Any] = self._load(rec["cp"])
        values: dict[str, Any] = {}
        for channel, version in checkpoint.get("channel_versions", {}).items():
            found = idx.blobs.get((cp.ns, channel, str(version)))
            if found is None:
                continue
            seq, entry = found
            if "m" in entry:
                values[channel] = self._list_objects(idx, seq, channel).copy()
            elif "s" in entry:
                values[channel] = self._load(entry["s"])
        checkpoint["channel_values"] = values
        table = idx.writes.get((cp.ns, cp.id), {})
        ordered = sorted(table.values(), key=lambda w: (w.task_path, w.task_id, w.idx))
        writes = [(w.task_id, w.channel, self._load(w.typed)) for w in ordered]
        head = idx.head(cp.ns)
        config: RunnableConfig = {"configurable": {
            "thread_id": tid, "checkpoint_ns": cp.ns, "checkpoint_id": cp.id,
            HEAD_KEY: head is not None and head.id == cp.id,
        }}
        parent = None
        if cp.parent is not None:
            parent = {"configurable": {
                "thread_id": tid, "checkpoint_ns": cp.ns, "checkpoint_id": cp.parent}}
        return CheckpointTuple(
            config=config, checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=self._load(rec["md"]), parent_config=parent,  # type: ignore[arg-type]
            pending_writes=writes,
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        conf = _conf(config)
        tid = _need(conf, "thread_id", "get_tuple")
        ns = str(conf.get("checkpoint_ns", "") or "")
        cid = conf.get("checkpoint_id")
        ws = thread_workspace(tid)
        with self._logs.lock(ws):
            idx = _own(self._logs.refresh(ws), tid, ws)
            cp = idx.get(ns, str(cid)) if cid else idx.head(ns)
            return None if cp is None else self._tuple(ws, tid, idx, cp)

    def _threads(self, config: RunnableConfig | None) -> list[tuple[str, str]]:
        conf = _conf(config)
        if "thread_id" in conf:
            tid = str(conf["thread_id"])
            return [(tid, thread_workspace(tid))]
        out = []
        for ws in self.store.workspaces():
            with self._logs.lock(ws):
                idx = self._logs.refresh(ws)
            for cp in (c for ns in idx.namespaces() for c in idx.visible(ns)):
                out.append((idx.thread or str(cp.rec.get("thread", ws)), ws))
                break
        return out

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        conf = _conf(config)
        want_ns = conf.get("checkpoint_ns")
        want_id = conf.get("checkpoint_id")
        before_id = _conf(before).get("checkpoint_id") if before else None
        count = 0
        for tid, ws in self._threads(config):
            with self._logs.lock(ws):
                idx = self._logs.refresh(ws)
                if "thread_id" in conf:
                    _own(idx, tid, ws)
                nss = [str(want_ns)] if want_ns is not None else idx.namespaces()
                cps = sorted((c for ns in nss for c in idx.visible(ns)),
                             key=lambda c: c.id, reverse=True)
                found: list[Any] = []
                for cp in cps:
                    if limit is not None and count + len(found) >= limit:
                        break
                    if want_id and cp.id != want_id:
                        continue
                    if before_id is not None and cp.id >= str(before_id):
                        continue
                    if filter:
                        md = self._load(cp.rec["md"])
                        if any(md.get(k) != v for k, v in filter.items()):
                            continue
                    found.append(self._tuple(ws, tid, idx, cp))
            for tup in found:
                yield tup
                count += 1
            if limit is not None and count >= limit:
                return

    # --- writes ---------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        conf = _conf(config)
        tid = _need(conf, "thread_id", "put")
        ns = str(conf.get("checkpoint_ns", "") or "")
        parent_id = conf.get("checkpoint_id")
        parent_id = str(parent_id) if parent_id else None
        ws = thread_workspace(tid)
        guarded = conf.get(HEAD_KEY) is True and parent_id is not None
        md = get_checkpoint_metadata(config, metadata)
        first_input = parent_id is None and md.get("source") == "input" and md.get("step") == -1
        values = checkpoint.get("channel_values", {})
        bare = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        cid = str(checkpoint["id"])
        fresh: list[tuple[int, BaseMessage]] = []
        # channel -> (the parent's list, how much of it the value keeps, the value)
        lists: dict[str, tuple[ObjectList | None, int, list[Any]]] = {}

        def build(idx: ThreadIndex) -> list[dict[str, Any]]:
            head = idx.head(ns)
            if guarded and (head is None or head.id != parent_id):
                raise CheckpointConflict(
                    f"thread {tid!r} namespace {ns!r}: checkpoint {parent_id} is no longer "
                    f"the newest (another writer added {head.id if head else 'none'}); "
                    "nothing was written. Load the thread again and retry, or fork "
                    "deliberately from an explicit checkpoint_id"
                )
            if first_input and head is not None:
                raise CheckpointConflict(
                    f"thread {tid!r} namespace {ns!r}: another writer started this thread "
                    f"first (checkpoint {head.id}); nothing was written. Load it and retry"
                )
            parent = idx.get(ns, parent_id) if parent_id else None
            rows: list[dict[str, Any]] = []
            blobs: dict[str, Any] = {}
            fresh.clear()
            lists.clear()
            for channel, version in new_versions.items():
                if channel not in values:
                    continue
                value = values[channel]
                made = None
                if channel in self.message_channels and isinstance(value, list):
                    mark = len(rows)
                    made = self._messages_entry(
                        idx, ns, channel, value, parent, idx.next_seq, rows)
                    if made is None:
                        del rows[mark:]
                if made is not None:
                    desc, new, base, keep = made
                    fresh.extend(new)
                    lists[channel] = (base, keep, value)
                    blobs[channel] = {"v": version, "m": desc}
                else:
                    blobs[channel] = {"v": version, "s": self._dump(value)}
            rec = {
                "t": "cp", "thread": tid, "ns": ns, "id": cid, "parent": parent_id,
                "run": md.get("run_id"), "cp": self._dump(bare), "md": self._dump(md),
                "cv": {k: v for k, v in checkpoint.get("channel_versions", {}).items()
                       if k in self.message_channels},
                "blobs": blobs,
            }
            rows.append(_empty_record(rec))
            return rows

        with self._logs.lock(ws):
            idx, seqs = self._logs.append(ws, _owning(tid, ws, build))
            for seq, message in fresh:  # the graph holds these objects: keep them
                idx.objects[seq] = message
            for channel, (base, keep, value) in lists.items():
                # The next put's base, as objects: the parent's list grown in
                # place by the new messages (or, for a fork, a copy), never
                # the caller's list, which the caller may change later.
                objects = (base.extended(value, keep) if base is not None
                           else ObjectList(list(value), len(value)))
                idx.remember_objects(seqs[-1], channel, objects)
            head = idx.head(ns)
        return {"configurable": {
            "thread_id": tid, "checkpoint_ns": ns, "checkpoint_id": cid,
            HEAD_KEY: head is not None and head.id == cid,
        }}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        conf = _conf(config)
        tid = _need(conf, "thread_id", "put_writes")
        ns = str(conf.get("checkpoint_ns", "") or "")
        cid = _need(conf, "checkpoint_id", "put_writes")
        ws = thread_workspace(tid)

        def build(idx: ThreadIndex) -> list[dict[str, Any]]:
            table = idx.writes.get((ns, cid), {})
            entries = []
            for i, (channel, value) in enumerate(writes):
                w_idx = WRITES_IDX_MAP.get(channel, i)
                if w_idx >= 0 and (task_id, w_idx) in table:
                    continue
                entries.append([w_idx, channel, *self._dump(value)])
            if not entries:
                return []
            rec = {"t": "w", "thread": tid, "ns": ns, "cp": cid, "task": task_id,
                   "path": task_path, "w": entries}
            return [_empty_record(rec)]

        with self._logs.lock(ws):
            self._logs.append(ws, _owning(tid, ws, build))

    def delete_thread(self, thread_id: str) -> None:
        ws = thread_workspace(str(thread_id))
        with self._logs.lock(ws):
            _own(self._logs.refresh(ws), str(thread_id), ws)
            self.store.delete(ws)
            self._logs.forget(ws)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = sorted({str(r) for r in run_ids})
        if not runs:
            return
        for _tid, ws in self._threads(None):
            def build(idx: ThreadIndex) -> list[dict[str, Any]]:
                hit = any(cp.run_id in runs for ns in idx.namespaces() for cp in idx.visible(ns))
                return [_empty_record({"t": "drop_runs", "runs": runs})] if hit else []

            with self._logs.lock(ws):
                self._logs.append(ws, build)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        if strategy not in ("keep_latest", "delete"):
            raise LedgerError(f"prune: unknown strategy {strategy!r} (keep_latest or delete)")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            ws = thread_workspace(str(thread_id))

            def build(idx: ThreadIndex) -> list[dict[str, Any]]:
                keep = {}
                for ns in idx.namespaces():
                    head = idx.head(ns)
                    if head is not None:
                        keep[ns] = head.id
                if all(len(idx.visible(ns)) <= 1 for ns in idx.namespaces()):
                    return []
                return [_empty_record({"t": "prune", "keep": keep})]

            with self._logs.lock(ws):
                self._logs.append(ws, _owning(str(thread_id), ws, build))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        src_tid, dst_tid = str(source_thread_id), str(target_thread_id)
        src, dst = thread_workspace(src_tid), thread_workspace(dst_tid)
        if src == dst:
            raise LedgerError(f"copy_thread: source and target are the same thread {src_tid!r}")
        history = self.store.history(src)
        try:
            history.require()
        except WorkspaceNotFound:
            return
        with self._logs.lock(dst):
            if not self.store.history(dst).exists():
                with self._logs.lock(src):
                    _own(self._logs.refresh(src), src_tid, src)
                    try:
                        history.fork(dst)
                    except LedgerError:  # ForkRefused: another writer made it first
                        if not self.store.history(dst).exists():
                            raise
                    else:
                        self._logs.forget(dst)
                        self._logs.append(dst, lambda _idx: [_empty_record(
                            {"t": "copy", "thread": dst_tid, "from": src_tid})])
                        return
        with self._logs.lock(src):
            _own(self._logs.refresh(src), src_tid, src)
            snap = history.snapshot()
            source = [r.data for r in history.rows() if r.seq < snap.next_seq]

        def build(idx: ThreadIndex) -> list[dict[str, Any]]:
            mapping: dict[int, int] = {}
            rows: list[dict[str, Any]] = []
            for data in source:
                if data.get("kind", "message") not in ("message", "warning", "truncation"):
                    continue
                mapping[int(data["seq"])] = idx.next_seq + len(rows)
                row = {k: v for k, v in data.items() if k not in ("seq", "batch")}
                rec = row.get("meta", {}).get(META_KEY)
                if isinstance(rec, dict):
                    row["meta"] = {**row["meta"], META_KEY: _renumbered(rec, mapping, dst_tid)}
                rows.append(row)
            return rows

        with self._logs.lock(dst):
            self._logs.append(dst, _owning(dst_tid, dst, build))

    # --- async twins ------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for tup in found:
            yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)


def _renumbered(rec: dict[str, Any], mapping: dict[int, int], thread: str) -> dict[str, Any]:
    """A bookkeeping record with its row references moved to the copy's seqs."""
    out = dict(rec)
    if "thread" in out:
        out["thread"] = thread
    blobs = out.get("blobs")
    if isinstance(blobs, dict):
        moved = {}
        for channel, entry in blobs.items():
            if isinstance(entry, dict) and isinstance(entry.get("m"), dict):
                m = entry["m"]
                base = m.get("base")
                m = {**m, "base": mapping[int(base)] if base is not None else None,
                     "add": [mapping[int(s)] for s in m.get("add", [])]}
                entry = {**entry, "m": m}
            moved[channel] = entry
        out["blobs"] = moved
    return out
