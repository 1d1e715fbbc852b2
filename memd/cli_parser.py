"""The `memd` command line's grammar: every command, its arguments and their help texts (what `--help` shows).

It only describes: memd.cli parses with `build_parser()` and does the rest (calls the client, formats, picks
exit codes), so that module stays the thin dispatch and this one is where a readable command's arguments are
declared. The `memd call METHOD` subcommands are derived from the method declarations by memd.cli_call. Imports
memd (its version) and memd.cli_call.
"""

from __future__ import annotations

import argparse
from typing import Any

from memd import __version__
from memd.cli_call import add_parsers

WS_HELP = "workspace name (as `memd workspaces` lists them)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memd", description="memd: a memory daemon for AI agents")
    parser.add_argument("--version", action="version", version=f"memd {__version__}")
    parser.add_argument("--config", help="config file (default: $MEMD_CONFIG, ~/.config/memd/config.toml, embedded)")
    parser.add_argument("--socket", help="daemon socket (default: $MEMD_SOCKET, then the config's server.socket)")
    parser.add_argument("--json", action="store_true", help="print the raw JSON result")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # The same options are accepted after the command too (`memd run --config FILE`, as units write it).
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS, help="config file (as before the command)")
    common.add_argument("--socket", default=argparse.SUPPRESS, help="daemon socket (as before the command)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the raw JSON result")

    def add(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        if "help" in kwargs:
            kwargs.setdefault("description", kwargs["help"])
        return sub.add_parser(name, parents=[common], **kwargs)

    def add_workspace(p: argparse.ArgumentParser) -> None:
        p.add_argument("workspace", help=WS_HELP)

    add("run", help="run the daemon in the foreground (what systemd starts)")
    add("ping", help="check that the daemon answers")
    p = add("status", help="daemon and per-workspace token usage")
    p.add_argument(
        "--summary", action="store_true", help="counts, and only the workspaces with a problem (cheap at thousands)"
    )
    add("metrics", help="Prometheus metrics (text exposition format)")
    add("workspaces", help="list workspaces")
    add("reload", help="re-read the config (returns when done or failed)")
    add("sockname", help="print the socket path the CLI would use")

    p = add("start-session", help="start or resume a session; prints the resume packet")
    add_workspace(p)
    p.add_argument("task", nargs="?", help="what the agent works on; a different task starts a fresh session")
    p.add_argument("--session-id", help="the session's id (default: generated, sess-YYYYMMDD-HHMMSS-xxxx)")
    p.add_argument("--topic", help="selects the relevant learnings (default: the task)")

    p = add("progress", help="update the current step, files and pending actions")
    add_workspace(p)
    p.add_argument("--step", help="the new current step (replaces the old one)")
    p.add_argument("--file", action="append", default=[], dest="files", metavar="FILE", help="a file modified (repeat)")
    p.add_argument(
        "--add", action="append", default=[], dest="pending_add", metavar="ACTION", help="add a pending action (repeat)"
    )
    p.add_argument(
        "--done",
        action="append",
        default=[],
        dest="pending_done",
        metavar="ACTION",
        help="mark a pending action done (repeat); one that was not pending is reported and exits 1",
    )

    p = add("decide", help="record a decision")
    add_workspace(p)
    p.add_argument("action", help="what was decided")
    p.add_argument("--reason", required=True, help="why (required)")
    p.add_argument("--risk", help="the risk it carries, e.g. low")

    p = add("note", help="add a working-context note to the hot tier")
    add_workspace(p)
    p.add_argument("text", help="the note")

    p = add("log", help="append an entry to today's warm log")
    add_workspace(p)
    p.add_argument("action", help="what was done (the entry's heading)")
    p.add_argument("--detail", action="append", default=[], metavar="KEY=VALUE", help="a detail line (repeat)")
    p.add_argument("--result", help="the outcome (the entry's Result: line)")

    p = add("learn", help="add a long-term learning to cold/MEMORY.md")
    add_workspace(p)
    p.add_argument("category", help="its section in cold/MEMORY.md, e.g. Performance")
    p.add_argument("text", help="the learning")

    for name, help_text in (
        ("context", "print the assembled context"),
        ("memory", "relevant cold learnings"),
    ):
        p = add(name, help=help_text)
        add_workspace(p)
        p.add_argument("--topic", help="selects the relevant learnings (default: the session's task)")
        if name == "context":
            p.add_argument("--all", action="store_true", help="everything, not trimmed to the tiers' token budgets")
            p.add_argument("--proposals", action="store_true", help="also the proposals of cold/PROPOSED.md")

    p = add(
        "search",
        help="search every tier (and archived days) of one workspace or of every one you may read",
        epilog='Query: words (all must match; "fixed" also finds "fix"), "a phrase", prefix*, a OR b, -excluded. '
        "With two or more words, the first names a workspace when memd serves one by that name; quote the whole "
        "query to search for it instead.",
    )
    p.add_argument("words", nargs="+", metavar="[WS] QUERY", help="a workspace (optional), then the query")
    p.add_argument("--tier", action="append", default=[], dest="tiers", choices=("hot", "warm", "cold"),
                   help="only this tier (repeat)")  # fmt: skip
    p.add_argument("--since", help="only items dated on or after this day, YYYY-MM-DD")
    p.add_argument("--until", help="only items dated on or before this day, YYYY-MM-DD")
    p.add_argument("--limit", type=int, help="most hits shown (default 10)")
    p.add_argument("--offset", type=int, help="hits skipped (the next page)")

    p = add("reindex", help="build the search index again from the files (every workspace: root and memd's uid)")
    p.add_argument("workspace", nargs="?", help="workspace name (default: every workspace)")

    p = add("hot", help="print the hot tier")
    add_workspace(p)
    p = add("recent", help="recent warm activity")
    add_workspace(p)
    p.add_argument("--days", type=int, help="calendar days back from today, today included (default: warm.recent_days)")

    p = add("day", help="one day of warm activity (from warm/ or the archive)")
    add_workspace(p)
    p.add_argument("date", help="the day, YYYY-MM-DD")

    p = add("proposals", help="candidate learnings retention proposed (cold/PROPOSED.md)")
    add_workspace(p)
    for name, help_text in (
        ("accept", "move a proposal into cold/MEMORY.md under its category"),
        ("reject", "drop a proposal from cold/PROPOSED.md"),
    ):
        p = add(name, help=help_text)
        add_workspace(p)
        p.add_argument("id", help="the proposal's id (from `memd proposals`)")

    p = add("sweep", help="run warm retention now (or list what it would remove)")
    p.add_argument("workspace", nargs="?", help="workspace name (default: every workspace)")
    p.add_argument("--dry-run", action="store_true", help="only list what a real sweep would remove")
    p.add_argument("--confirm", action="store_true",
                   help="sweep a workspace adopted with day files (only reports until one is confirmed)")  # fmt: skip

    p = add("snapshot", help="commit the workspace's state to its git history now")
    add_workspace(p)
    p.add_argument("--reason", help="recorded as the commit's Memd-Reason (default: requested)")

    p = add("history", help="snapshot commits, newest first")
    add_workspace(p)
    p.add_argument("path", nargs="?", help="only commits touching this path, e.g. hot/context.json or warm")
    p.add_argument("--limit", type=int, help="most commits shown (default 50)")

    p = add("diff", help="diff between two snapshots (or one and now)")
    add_workspace(p)
    p.add_argument("rev", help="the old revision, e.g. HEAD~1 or a commit from `memd history`")
    p.add_argument("rev2", nargs="?", help="the new revision (default: the files as they are now)")

    p = add("show", help="a file as it was at a snapshot: memd show WS REV:PATH")
    add_workspace(p)
    p.add_argument("spec", metavar="REV:PATH", help="a revision and a file path, e.g. HEAD~1:hot/context.json")

    p = add("restore", help="restore paths to a snapshot, as a new commit")
    add_workspace(p)
    p.add_argument("rev", help="the revision to bring files back to")
    p.add_argument("paths", nargs="*", help="paths to restore, e.g. hot (default: snapshot.paths)")

    p = add("push", help="push the workspace's snapshots to its remote now (after a divergence is fixed)")
    add_workspace(p)

    p = add("sync", help="sync the workspace with its git remote now: fetch, merge, push (docs/sync.md)")
    add_workspace(p)

    p = add(
        "checkpoint",
        help="compact hot context now: memd checkpoint WS | memd checkpoint show WS ID | memd checkpoint undo WS ID",
    )
    p.add_argument(
        "words",
        nargs="+",
        metavar="WS | show WS ID | undo WS ID",
        help="a workspace to compact now; or show/undo, a workspace and a checkpoint id (from `memd checkpoints`)",
    )
    p.add_argument("--if-needed", action="store_true", help="only when over the threshold and not backing off")

    p = add("checkpoints", help="list a workspace's checkpoints")
    add_workspace(p)

    add_parsers(sub, common)

    p = add("mcp", help="serve memd's tools to an agent host over MCP (stdio); docs/agents.md")
    p.add_argument("--workspace", help="the workspace (default: $MEMD_WORKSPACE, else the one bound to the project)")

    p = add("hook", help="an agent host's lifecycle hook: reads its JSON on stdin, never fails the host")
    p.add_argument("event", help="session-start, pre-compact, stop, session-end, prompt-submit (or the host's name)")
    p.add_argument("--host", required=True, choices=["claude", "codex", "gemini"], help="the agent host")
    p.add_argument("--workspace", help="the workspace (default: $MEMD_WORKSPACE, else the one bound to the cwd)")
    p.add_argument("--timeout", type=float, default=2.0, help="give up after this many seconds (default 2)")
    p.add_argument("--max-chars", type=int, help="most characters of context to inject (default: the host's limit)")

    p = add("config", help="check or show the configuration")
    config_sub = p.add_subparsers(dest="config_command", required=True, metavar="check | show")
    c = config_sub.add_parser(
        "check", parents=[common], help="validate a config file", description="validate a config file"
    )
    c.add_argument("file", nargs="?", help="the file to check (default: the one memd would use)")
    config_sub.add_parser(
        "show", parents=[common], help="print the effective config as TOML", description="print the effective config"
    )
    return parser
