"""``tledger stat`` for the file engine: what the receipt, the segments and
the quarantine of one workspace hold (read-only)."""

from __future__ import annotations

import os
from functools import partial
from typing import TYPE_CHECKING

from ledger.core.format import files as ffmt
from ledger.core.rules import FloorAt
from ledger.storage.engine import FileStat, SegmentStat, StatReceipt, StatReport
from ledger.storage.files import segments as segs
from ledger.storage.files.receipt import read_receipt, receipt_status

if TYPE_CHECKING:
    from ledger.storage.files.ports import FileHistory


def stat_report(h: FileHistory) -> StatReport:
    """The stat document of a file-engine workspace (read-only): receipt,
    epoch, window, number of windows, floor, segments with their line counts,
    quarantine bytes. Windows are counted from the boundary index (INDEX; a
    segment it does not cover is scanned)."""
    h.require()
    st = h.snapshot()
    receipt = read_receipt(h.path)
    seg_list: list[SegmentStat] = []
    total_bytes = 0
    total_rows = 0
    for number, stamp in [*st.sealed, *([(st.active, st.active_stamp)] if st.active_stamp else [])]:
        path = segs.segment_path(h.path, number)
        with open(path, "rb") as f:
            lines = sum(chunk.count(b"\n") for chunk in iter(partial(f.read, 1 << 20), b""))
        seg_list.append(SegmentStat(ffmt.segment_name(number), stamp.size, lines))
        total_bytes += stamp.size
        total_rows += lines
    active = (st.active, st.active_stamp) if st.active_stamp is not None else None
    bounds = h.index.all_bounds(st.sealed, active, st.epoch if st.verified else None)
    quarantine = os.path.join(h.path, ffmt.QUARANTINE_DIR)
    q_bytes = 0
    if os.path.isdir(quarantine):
        for name in os.listdir(quarantine):
            try:
                q_bytes += os.stat(os.path.join(quarantine, name)).st_size
            except OSError:
                pass
    floor = None
    if st.floor is not None:
        # damaged: damage that may have been a reset, or a recorded floor the
        # log lost; window reads and session_history are refused until repair
        floor = FloorAt(st.floor.seq if st.floor.seq >= 0 else None,
                        ffmt.segment_name(st.floor.segment), st.floor.offset, st.floor.damaged)
    return StatReport(
        workspace=h.workspace,
        engine="files",
        epoch=st.epoch,
        window=st.window_seq,
        windows=1 + len(bounds),  # window 0, then one per boundary
        next_seq=st.next_seq,
        floor=floor,
        rows=total_rows,
        bytes=total_bytes,
        quarantine_bytes=q_bytes,
        detail=FileStat(
            receipt=StatReceipt(
                receipt_status(h.path),
                receipt.epoch if receipt else None,
                receipt.next_seq if receipt else None,
                st.verified,
            ),
            segments=seg_list,
            stray_temp_files=segs.stray_temps(h.path),
        ),
    )
