"""A checkpoint's afterlife: finding its record, showing what it compressed, and undoing it.

Records live in hot (the newest ten) and in the git history of hot/; the entries a checkpoint compressed are in its
pre-state commit. Undo puts them back beside every write made since (not a rollback of the file) and commits the
result; memd.checkpoint decides when an undo may run. Imports memd.checkpoint_plan, memd.checkpoint_flush,
memd.snapshots, memd.snapshot_history, memd.workspace, memd.batch (its `Draft`), the hot format and memd.errors.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from typing import Any

from memd import snapshot_history
from memd.batch import Draft
from memd.checkpoint_flush import entry_key_in
from memd.checkpoint_plan import keyed
from memd.errors import CheckpointFailed, MemdError, NotFound
from memd.snapshots import Snapshotter
from memd.tiers import hot_format
from memd.tiers.hot_format import HotDoc
from memd.workspace import Workspace


async def undo(snapshots: Snapshotter, ws: Workspace, checkpoint_id: str) -> dict[str, Any]:
    """Put back what checkpoint `checkpoint_id` compressed and its previous summary, keeping every write made
    since (not a rollback of the file), as a new commit. Only the newest applied summary can be undone: a
    later checkpoint folded this one's summary into its own, so undo that one first."""
    record = await find_record(snapshots, ws, checkpoint_id)
    if not record.get("pre_commit"):
        raise CheckpointFailed(
            f"checkpoint {checkpoint_id!r} has no pre-state commit (snapshots were disabled): nothing to undo from"
        )
    before = await doc_at(snapshots, ws, record["pre_commit"])
    written = (
        str((await doc_at(snapshots, ws, record["post_commit"])).get("summary") or "")
        if record.get("post_commit")
        else None
    )
    by_list = record.get("compressed_by_list")
    every = {k for k in record.get("compressed") or [] if k != "summary"}
    originals = {
        field: [
            e
            for k, e in keyed(list(before.get(field) or []))
            if k in (set(by_list.get(field) or []) if isinstance(by_list, dict) else every)
        ]
        for field in ("notes", "decisions")
    }
    digest = record.get("summary_sha256")
    if not digest and written is None:
        raise CheckpointFailed(
            f"checkpoint {checkpoint_id!r} has neither a summary digest nor a post-state commit, so memd cannot "
            "tell whether its summary is still the one in place; restore from git instead (memd history)"
        )
    undo_id = checkpoint_id

    def apply(draft: Draft) -> dict[str, Any]:
        doc = draft.edit_hot()
        current = str(doc.get("summary") or "")
        if (hashlib.sha256(current.encode()).hexdigest() != digest) if digest else (current != written):
            raise CheckpointFailed(
                f"the summary of {ws.name!r} is no longer the one checkpoint {undo_id} wrote (a later checkpoint "
                "or an edit replaced it); undo the later checkpoint first, or restore from git"
            )
        new = dict(doc)
        restored = 0
        for part in ("notes", "decisions"):
            present = {k for k, _ in keyed(list(doc.get(part) or []))}
            back = [e for e in originals[part] if not entry_key_in(e, present)]
            restored += len(back)
            new[part] = back + list(doc.get(part) or [])  # the compressed entries are the older ones
        new["summary"] = str(before.get("summary") or "")
        records = [dict(r) for r in doc.get("checkpoints") or []]
        for r in records:
            if r.get("id") == undo_id:
                r["undone_at"] = draft.now.isoformat(timespec="seconds")
        new["checkpoints"] = records
        draft.set_hot(new)
        draft.log("checkpoint-undo", (("id", undo_id), ("restored_entries", str(restored))))
        return {"id": undo_id, "restored_entries": restored}

    result = await ws.write(apply)
    commit, _ = await snapshots.snapshot(ws, "checkpoint undo", {"Memd-Checkpoint-Undone": undo_id}, whole=True)
    result.update(commit=commit, tokens=ws.hot.tokens)
    return result


async def find_record(snapshots: Snapshotter, ws: Workspace, checkpoint_id: str) -> dict[str, Any]:
    """A checkpoint record: from hot (the newest ten), else from the git history of hot/ (hot/memd.json, or
    hot/context.json before format 2)."""
    for r in ws.hot.doc.get("checkpoints") or []:
        if r.get("id") == checkpoint_id:
            return dict(r)
    if snapshots.config.enabled:
        for commit in await snapshot_history.history(snapshots, ws, "hot", 10_000):
            if checkpoint_id not in json.dumps(commit):
                continue
            with contextlib.suppress(MemdError, ValueError):
                doc = await doc_at(snapshots, ws, str(commit.get("commit") or ""))
                for r in doc.get("checkpoints") or []:
                    if r.get("id") == checkpoint_id:
                        return dict(r)
    raise NotFound(f"no checkpoint {checkpoint_id!r} in {ws.name!r} (hot or git history); see checkpoint.list")


async def show(snapshots: Snapshotter, ws: Workspace, checkpoint_id: str) -> dict[str, Any]:
    record = await find_record(snapshots, ws, checkpoint_id)
    originals: list[dict[str, Any]] = []
    summary_before = ""
    summary = str(ws.hot.doc.get("summary") or "")
    if record.get("pre_commit"):
        before = await doc_at(snapshots, ws, record["pre_commit"])
        after = await doc_at(snapshots, ws, record["post_commit"]) if record.get("post_commit") else ws.hot.doc
        summary = str(after.get("summary") or "")  # the summary this checkpoint wrote
        by_list = record.get("compressed_by_list")  # records before stop 41
        every = record.get("compressed")
        for kind, field in (("decision", "decisions"), ("note", "notes")):
            before_keyed = keyed(list(before.get(field) or []))
            if isinstance(by_list, dict) or isinstance(every, list):
                # The record's keys are those of the pre-state; keying what is left afresh would renumber a twin
                # (`sha256:…#1` becomes `sha256:…`) and hide its compressed copy.
                compressed = set(by_list.get(field) or []) if isinstance(by_list, dict) else set(every or [])
                originals += [{"kind": kind, **e} for k, e in before_keyed if k in compressed]
                continue
            remaining = {k for k, _ in keyed(list(after.get(field) or []))}
            originals += [{"kind": kind, **e} for k, e in before_keyed if k not in remaining]
        summary_before = str(before.get("summary") or "")
    return {
        "record": record,
        "original_entries": originals,
        "previous_summary": summary_before,
        "summary": summary,
        "undo": f"memd restore {ws.name} {record.get('pre_commit') or '<pre-commit>'} hot",
    }


async def doc_at(snapshots: Snapshotter, ws: Workspace, commit: str) -> HotDoc:
    """The hot document at `commit`: both files merged, as the store reads them; a commit from before format 2
    has only hot/context.json, which held everything."""
    parts: list[HotDoc | None] = []
    for name in (hot_format.CONTEXT_FILE, hot_format.OWN_FILE):
        path = f"hot/{name}"
        try:
            raw = await snapshot_history.show(snapshots, ws, commit, path)
        except NotFound:
            parts.append(None)
            continue
        parts.append(hot_format.parse(raw, f"{commit[:12]}:{path}"))
    if parts == [None, None]:
        raise NotFound(f"hot/ holds neither {hot_format.CONTEXT_FILE} nor {hot_format.OWN_FILE} at {commit[:12]}")
    return hot_format.merge(parts[0], parts[1])[0]
