"""A row engine's workspace above its primitives, written once: every
``WorkspaceEngine`` operation (``ledger.storage.engine``) that is not a
primitive, over ``StoredRows`` (``ledger.storage.primitives``). An engine
subclasses ``RowWorkspace`` and implements the primitives only: ``exists``,
``locked``, ``head``, ``stored``, ``boundary_before``, ``replace``,
``append_batch``, ``load_rows``, the quarantine's ``put``, ``list`` and
``clean``, and where its index of ranked search and its rows are kept
(``recall_index``, ``where``). The memory engine is exactly that.

What it builds on them:

- the reads: ``require``, ``snapshot``, ``get``, ``window_rows`` and ``rows``
  (streamed in steps; a rewrite while streaming raises HistoryDamaged, "read
  again", as on every engine), each row verified as it is decoded;
- ``pages``: ``RowPages``, the row engines' page rules (``ledger.storage.
  seqpages``) over ``stored``, with ranked search from an index kept in this
  process (``ledger.storage.rowrecall``);
- ``verify`` and ``repair`` (``ledger.storage.rowcheck``): the stored rows,
  the head and the quarantine read under one ``locked()``; a repair is one
  ``replace`` that puts the batches failing verification in the quarantine,
  rewrites a wrong boundary reason, holds the floor at a damaged row that may
  have been a reset, and settles the head (a new epoch), read again when the
  workspace moved meanwhile;
- ``backup`` (a file-engine directory, ``ledger.storage.copydir``) and ``stat``;
- the rewrites (``ledger.storage.rewrites``).

PostgreSQL shares the rewrites, the page rules and the checks, and reads in
its own snapshots (``ledger.storage.postgres``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager

from ledger.core.bounds import LINE_CAP
from ledger.core.checks import CheckReport, Progress, check_policy
from ledger.core.errors import (
    CommitFailed,
    Conflict,
    CursorExpired,
    HistoryDamaged,
    RecoveryError,
    WorkspaceNotFound,
)
from ledger.core.ranking import Query
from ledger.core.rows import Row
from ledger.storage import rowcheck, vectors
from ledger.storage.copydir import write_workspace_dir
from ledger.storage.engine import (
    BackupResult,
    Candidate,
    PageUse,
    QuarantineEntry,
    RowStat,
    StatReport,
    StoreOptions,
    T,
)
from ledger.storage.primitives import LAST_SEQ, Edit, Put, Replaced, RowPrimitives, StoredRow
from ledger.storage.rewrites import ATTEMPTS, RowRewrites
from ledger.storage.rowrecall import Recall
from ledger.storage.seqpages import RowState, SeqReader, decode_row

STEP = 512  # rows read per step of a stream


class RowWorkspace(RowRewrites, ABC):
    """The operations above the primitives (module doc); ``engine`` names
    the engine in reports, ``tag`` starts the cursors' binding, and
    ``quarantine_name`` says where repair puts rows."""

    workspace: str
    store: StoreOptions
    engine = "rows"
    tag = "r"
    quarantine_name = "the quarantine"

    # --- the primitives ----------------------------------------------------------

    @abstractmethod
    def exists(self) -> bool: ...

    @abstractmethod
    def locked(self) -> AbstractContextManager[None]: ...

    @abstractmethod
    def head(self) -> RowState: ...

    @abstractmethod
    def stored(self, first: int, last: int, limit: int = LAST_SEQ) -> list[StoredRow]: ...

    @abstractmethod
    def boundary_before(self, seq: int) -> int: ...

    @abstractmethod
    def replace(self, expect: RowState, edits: Sequence[Edit], put_aside: str | None,
                hold: int = 0) -> Replaced: ...

    @abstractmethod
    def list_quarantine(self) -> list[QuarantineEntry]: ...

    @abstractmethod
    def recall_index(self) -> Recall:
        """The workspace's index of ranked search (made on first use; call
        under ``locked()``)."""

    @abstractmethod
    def vector_backend(self) -> vectors.Backend:
        """Where the workspace's vectors of the semantic channel are kept
        (``ledger.storage.vectors``; call under ``locked()``)."""

    @abstractmethod
    def where(self) -> RowStat:
        """Where the rows are, for ``stat``."""

    # --- reads -------------------------------------------------------------------

    def read(self, first: int, last: int) -> list[Row]:
        return [decode_row(self.workspace, r.seq, r.raw) for r in self.stored(first, last)]

    def require(self) -> None:
        self.head()

    def snapshot(self) -> RowState:
        try:
            return self.head()
        except WorkspaceNotFound:
            return RowState(1, 0, None, None)

    def get(self, seq: int) -> Row | None:
        got = self.read(seq, seq)
        return got[0] if got else None

    def window_rows(self) -> list[Row]:
        return self.window_state()[0]

    def window_state(self) -> tuple[list[Row], RowState]:
        with self.locked():
            head = self.head()
            return self.read(head.window_seq + 1, LAST_SEQ), head

    def rows(self, after_seq: int | None = None) -> Iterator[Row]:
        """Every row after ``after_seq``, read in steps (module doc)."""
        return self._stream(self.head().epoch, after_seq or 0)

    def _stream(self, epoch: int, after: int) -> Iterator[Row]:
        while True:
            with self.locked():
                self._same(epoch)
                got = self.stored(after + 1, LAST_SEQ, STEP)
            if not got:
                return
            for r in got:
                self._same(epoch)  # before every row: a rewrite is seen at once
                yield decode_row(self.workspace, r.seq, r.raw)
            after = got[-1].seq

    def _same(self, epoch: int) -> None:
        if self.head().epoch != epoch:
            raise HistoryDamaged(f"workspace {self.workspace!r}: a rewrite ran while reading "
                                 "(new epoch); read again")

    def pages(self, use: PageUse[T]) -> T:
        return use(RowPages(self))

    # --- verify and repair -------------------------------------------------------

    def _verified(self) -> tuple[RowState, rowcheck.Verified]:
        with self.locked():
            head = self.head()
            found = rowcheck.verify_rows(self.stored(0, LAST_SEQ))
            held = sorted({e.seq for e in self.list_quarantine() if e.seq is not None})
        found.problems.extend(found.open_calls())
        rowcheck.explain_gaps(found, lambda a, b: sum(a < s < b for s in held),
                              self.quarantine_name)
        rowcheck.check_head(found, head)
        return head, found

    def verify(self, progress: Progress | None = None) -> CheckReport:
        _, found = self._verified()
        return rowcheck.report(self.workspace, found.problems,
                               rowcheck.actions(self.quarantine_name), found.rows, found.bytes,
                               self.engine)

    def repair(self, policy: str = "salvage", dry_run: bool = False,
               progress: Progress | None = None) -> rowcheck.RowRepair:
        out, _ = repair_rows(self, self._verified, self.quarantine_name, policy, dry_run)
        if not dry_run:
            out.after = self.verify()
        return out

    # --- backup and stat -----------------------------------------------------------

    def backup(self, dest: str) -> BackupResult:
        """This workspace as a file-engine directory ``dest`` (new), from one
        consistent read of its rows (``ledger.storage.copydir``)."""
        with self.locked():
            self.head()
            raws = [r.raw for r in self.stored(0, LAST_SEQ)]
        return BackupResult(self.workspace, dest, 2, write_workspace_dir(dest, raws))

    def stat(self) -> StatReport:
        with self.locked():
            head, rows = self.head(), self.stored(0, LAST_SEQ)
            q = sum(e.bytes for e in self.list_quarantine())
        where = self.where()
        return head.stat(self.workspace, engine=self.engine, database=where.database,
                         root=where.root, boundaries=sum(r.boundary is not None for r in rows),
                         rows=len(rows), nbytes=sum(len(r.raw) + 1 for r in rows),
                         quarantine_bytes=q)


def repair_rows(
    p: RowPrimitives, verified: Callable[[], tuple[RowState, rowcheck.Verified]],
    quarantine: str, policy: str, dry_run: bool,
) -> tuple[rowcheck.RowRepair, rowcheck.Verified]:
    """Settle what ``verified()`` finds with one ``replace`` (module doc),
    verified again after a ``Conflict``; a dry run writes nothing. The report
    (without ``after``) and what was found."""
    check_policy(policy)
    for _ in range(ATTEMPTS):
        head, found = verified()
        damage = [x for x in found.problems if not x.notice]
        if policy == "strict" and damage:
            raise RecoveryError(f"workspace {p.workspace!r}: damage found and policy "
                                "strict refuses to remove anything")
        out = rowcheck.RowRepair(p.workspace, policy, dry_run, changed=bool(damage),
                                 problems=[x.__dict__ for x in damage],
                                 quarantined_batches=sorted(found.bad_batches),
                                 quarantine=quarantine)
        if dry_run or not damage:
            return out, found
        edits = [Edit(s, s) for s in found.bad_seqs]
        edits += [Edit(s, s, (Put(row, want),)) for s, want in found.projection.items()
                  for row in p.read(s, s)]
        try:
            out.epoch = p.replace(head, edits, "repair: failed verification",
                                  max(found.may_be_reset, default=0)).epoch
            return out, found
        except Conflict:
            continue
    raise CommitFailed(f"workspace {p.workspace!r}: repair failed: the workspace changed "
                       f"under it {ATTEMPTS} times in a row; nothing was changed")


class RowPages(SeqReader):
    """The page reader (``PageReader[RowState]``) of a ``RowWorkspace``: the
    row engines' rules over ``stored``, each page under ``locked()``."""

    def __init__(self, ws: RowWorkspace) -> None:
        self.ws = ws
        self.workspace = ws.workspace

    def exists(self) -> bool:
        return self.ws.exists()

    def locked(self) -> AbstractContextManager[None]:
        return self.ws.locked()

    def state(self) -> RowState:
        try:
            return self.ws.head()
        except WorkspaceNotFound:
            raise CursorExpired("the history is gone; start a new query") from None

    def binding(self, st: RowState) -> str:
        return f"{self.ws.tag}{st.epoch}"

    def source(self) -> RowPages:
        return self

    def lengths(self, first: int, stop: int, limit: int) -> list[tuple[int, int]]:
        return [(r.seq, len(r.raw)) for r in self.ws.stored(first, stop - 1, limit)]

    def fetch(self, seqs: list[int]) -> dict[int, bytes]:
        return {r.seq: r.raw for s in seqs for r in self.ws.stored(s, s, 1)}

    def is_boundary(self, seq: int) -> bool:
        return self.ws.boundary_before(seq + 1) == seq

    def boundary_before(self, seq: int) -> int:
        return self.ws.boundary_before(seq)

    def row_at(self, seq: int) -> tuple[int, bytes | None] | None:
        got = self.ws.stored(seq, seq, 1)
        if not got:
            return None
        raw = got[0].raw
        return len(raw), raw if len(raw) <= LINE_CAP else None

    def prepare_ranked(self) -> None:
        """Nothing: ``ranked`` brings the index up to date under the lock."""

    def read_order(self, seqs: list[int]) -> None:
        """Nothing: every row is at hand."""

    def ranked(
        self, st: RowState, query: Query, after: int, high: int, window: int | None
    ) -> list[Candidate]:
        index = self.ws.recall_index()
        index.refresh(self.ws, st)
        return index.candidates(query, after, high, window)

    def similar(
        self, st: RowState, text: str, after: int, high: int, window: int | None
    ) -> list[Candidate]:
        """From the vectors kept beside the index (``ledger.storage.vectors``),
        caught up with it."""
        embedder = self.ws.store.embedder
        if embedder is None:
            return []
        index = self.ws.recall_index()
        index.refresh(self.ws, st)

        def read(seq: int) -> bytes | None:
            got = self.ws.stored(seq, seq, 1)
            return got[0].raw if got and len(got[0].raw) <= LINE_CAP else None

        vs = vectors.ready(self.ws.vector_backend(), embedder, index.epoch, index.floor,
                           index.upto, index.docs_after, vectors.texts_of_rows(read))
        return vs.similar(vectors.query_vector(embedder, text), after, high, window)
