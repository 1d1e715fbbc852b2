"""How the `memd` command shows results to people: tables, usage bars, history lines. Imports nothing from memd."""

from __future__ import annotations

import json
from typing import Any


def _bar(usage: dict[str, Any], width: int = 20) -> str:
    percent = float(usage.get("percent", 0))
    filled = min(width, round(width * percent / 100))
    return f"[{'#' * filled}{'.' * (width - filled)}] {usage['tokens']:>7,}/{usage['budget']:<7,} {percent:5.1f}%"


def _search(result: dict[str, Any]) -> str:
    """One hit per two lines: where it is (workspace, file:lines, date, heading), then its snippet («marked»)."""
    lines = []
    for hit in result["hits"]:
        first, last = hit["lines"]
        where = f"{hit['file']}:{first}" + (f"-{last}" if last != first else "")
        when = " ".join(str(p) for p in (hit.get("date"), hit.get("time")) if p)
        heading = hit["heading"] or hit["kind"]
        lines.append(f"{hit['workspace']}  {where}  {when}  {heading}".rstrip())
        lines.append(f"    {hit['snippet']}")
    if not lines:
        return f"no hits for {result['query']!r} in {', '.join(result['workspaces']) or 'no readable workspace'}"
    if result.get("more"):
        lines.append("(more hits: --offset to page on)")
    return "\n".join(lines)


def _proposal(p: dict[str, Any]) -> str:
    """One proposal of cold/PROPOSED.md on one line (and the learning it would replace on the next)."""
    line = f"{p['id']}  [{p['category']}] {p['text']}  ({p['date']}"
    line += f", {p['kind']})" if p.get("kind") else ")"
    old = p.get("supersedes")
    return line + (f"\n    supersedes [{old['date']}] {old['text']}" if old else "")


def human(cmd: str, result: Any) -> str:
    """The readable form of a command's result (`--json` prints the result itself)."""
    if cmd == "status":
        lines = [
            f"memd {result['version']}  pid {result['pid']}  up {result['uptime_seconds']:.0f}s"
            f"  loop {result.get('loop')}",
            f"socket {result['socket']}",
            f"config {result['config']}  connections {result['connections']}",
        ]
        if result.get("summary"):
            counts = result["counts"]
            problems = ", ".join(f"{k.replace('_', ' ')} {n}" for k, n in counts.items() if n and k != "workspaces")
            lines.append(f"{counts['workspaces']} workspaces; {problems or 'no problems'}")
        for name, ws in result["workspaces"].items():
            lines.append(f"\n{name}  {ws['path']}")
            for tier, usage in ws["usage"].items():
                lines.append(f"  {tier:<5} {_bar(usage)}")
            for tier, err in ws.get("file_errors", {}).items():
                lines.append(f"  ! {tier}: {err}")
            if ws.get("write_fault"):
                lines.append(f"  ! last write error ({ws['last_write_error_at']}): {ws['last_write_error']}")
        return "\n".join(lines)
    if cmd == "search":
        return _search(result)
    if cmd == "reindex":
        counts = ", ".join(f"{name} {n:,}" for name, n in sorted(result["workspaces"].items())) or "no workspace"
        return f"reindexed in {result['seconds']:.2f}s: {counts} entries"
    if cmd == "context":
        usage = "  ".join(f"{t} {u['tokens']}/{u['budget']}" for t, u in result["usage"].items())
        return f"{result['text']}\n-- tokens: {usage}"
    if cmd == "metrics":
        return str(result["text"]).rstrip("\n")
    if cmd == "ping":
        return f"pong (memd {result['version']})"
    if cmd == "workspaces":
        return "\n".join(f"{w['name']:<20} {w['path']}" for w in result["workspaces"])
    if cmd == "start-session":
        return (
            str(result["context"]["text"])
            + f"\n-- session {result['session_id']} ({'resumed' if result['resumed'] else 'new'})"
        )
    if cmd == "hot":
        return str(result["rendered"])
    if cmd == "memory":
        return str(result["text"] or "(no relevant learnings)")
    if cmd == "checkpoint-undo":
        u = result["undone"]
        return f"checkpoint {u['id']} undone: {u['restored_entries']} entries back in hot ({u['tokens']} tokens)"
    if cmd == "checkpoint":
        r = result["checkpoint"]
        return f"checkpoint {r['id']}: hot {r['tokens_before']} -> {r['tokens_after']} tokens ({r['backend']})"
    if cmd == "checkpoints":
        return (
            "\n".join(
                f"{r['id']}  {r['at']}  {r['tokens_before']} -> {r['tokens_after']}  {r['backend']}"
                f"  pre {str(r['pre_commit'])[:10]}"
                for r in result["checkpoints"]
            )
            or "(no checkpoints)"
        )
    if cmd == "checkpoint-show":
        originals = "\n".join(
            f"- [{e['kind']}] {e.get('text') or e.get('action', '')}" for e in result["original_entries"]
        )
        replaced = len(result["original_entries"])
        return f"{result['summary']}\n-- replaced {replaced} entries:\n{originals}\n-- undo: {result['undo']}"
    if cmd == "push":
        push = (result.get("snapshot") or {}).get("push") or {}
        return f"push: {result['result']}" + (f"\n{push['error']}" if push.get("error") else "")
    if cmd == "sync":
        return sync_text(result.get("sync") or {})
    if cmd == "history":
        return (
            "\n".join(
                f"{c['rev'][:10]}  {c['time']}  {c['reason'] or c['subject']}"
                + (f"  [{c['session']}]" if c["session"] else "")
                + (f"  step: {c['step']}" if c["step"] else "")
                for c in result["commits"]
            )
            or "(no snapshots yet)"
        )
    if cmd == "diff":
        return str(result["diff"])
    if cmd == "show":
        return str(result["content"])
    if cmd == "sweep":
        return "\n".join(
            f"{r['workspace']}: held, would remove {', '.join(r['expired']) or 'nothing'}; {r['reason']}"
            if r.get("held")
            else f"{r['workspace']}: {'would remove' if r['dry_run'] else r['mode'] + 'd'} "
            f"{', '.join(r['expired'] if r['dry_run'] else r['removed']) or 'nothing'}"
            + "".join(
                f"\n  {'would propose' if r['dry_run'] else 'proposed'} {_proposal(x)}" for x in r.get("proposed", [])
            )
            for r in result["results"]
        )
    if cmd == "proposals":
        return "\n".join(_proposal(x) for x in result["proposals"]) or "(no proposals)"
    if cmd in ("accept", "reject"):
        done = result.get("accepted") or result.get("rejected")
        verb = "accepted into cold/MEMORY.md" if cmd == "accept" else "rejected"
        return f"{verb}: {_proposal(done)}" + (
            "\n  (replaced the learning it supersedes)" if result.get("replaced") else ""
        )
    if cmd == "recent":
        return (
            "\n".join(
                f"{day['date']} {e['time']}  {e['action']}" + (f"  -> {e['result']}" if "result" in e else "")
                for day in result["days"]
                for e in day["entries"]
            )
            or "(no recent activity)"
        )
    if cmd == "day":
        return (
            "\n".join(
                f"{e['time']}  {e['action']}" + (f"  -> {e['result']}" if "result" in e else "")
                for e in result["entries"]
            )
            or "(no entries)"
        )
    if cmd == "reload":
        return "reloaded" if result.get("reloaded") else "reload rejected:\n  " + "\n  ".join(result.get("errors", []))
    if isinstance(result, dict) and "usage" in result:
        usage = "  ".join(f"{t} {u['percent']}%" for t, u in result["usage"].items())
        if cmd == "progress" and result.get("not_pending"):
            return f"partly done: some --done actions were not pending (see below)  ({usage})"
        return f"ok  ({usage})"
    return json.dumps(result, indent=2, ensure_ascii=False)


def sync_text(report: dict[str, Any]) -> str:
    """`memd sync`: the outcome, and on a conflict what could not be merged and how to settle it."""
    lines = [f"sync: {report.get('state')}" + (f" (HEAD {str(report['head'])[:12]})" if report.get("head") else "")]
    if report.get("error"):
        lines.append(str(report["error"]))
    lines += [f"  conflict: {c['path']}: {c['message'] or c['kind']}" for c in report.get("conflicts") or []]
    if report.get("resolve"):
        lines.append("to settle it:")
        lines += [f"  - {step}" for step in report["resolve"]]
    return "\n".join(lines)
