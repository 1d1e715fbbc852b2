"""Every protocol method, declared once (memd.declare says what a declaration holds and what derives from it).

Adding a method: one `Method` here and its handler in memd.handlers' table; dispatch, the access check, `memd call`,
the MCP tool (when `mcp` is set) and the row docs/protocol.md must carry (a test says which) follow from it.
The order here is the order of the protocol table. Imports memd.declare only.
"""

from __future__ import annotations

from memd.declare import MAX_LABEL, Method, Param, Tool

_REV = Param(
    "rev", "string", "a git revision (`HEAD~1`, a commit id)", required=True, non_empty=True, max_len=MAX_LABEL
)
_PATHS = Param(
    "paths",
    "strings",
    "paths inside the snapshotted tiers (`hot`, `warm/2026-11-30.md`); default `snapshot.paths`",
    max_len=MAX_LABEL,
    max_items=64,
)
_TOPIC = Param("topic", "string", "words that select the relevant learnings; default: the session's task")
_PROPOSAL_ID = Param(
    "id", "string", "a proposal id from `proposals.list` (p-1a2b3c4d)", required=True, non_empty=True, max_len=MAX_LABEL
)
_CKPT_ID = Param(
    "id", "string", "a checkpoint id from `checkpoint.list`", required=True, non_empty=True, max_len=MAX_LABEL
)

METHODS: tuple[Method, ...] = (
    Method(
        "ping",
        "liveness and version",
        "public",
        "`{pong, version}`",
        workspace="none",
        taskless=True,
        cli="ping",
    ),
    Method(
        "status",
        "daemon, jobs, watcher and per-workspace health and usage",
        "public",
        "the daemon's health, per workspace usage and faults",
        workspace="none",
        params=(
            Param(
                "summary",
                "boolean",
                "true: counts, and only the workspaces with a problem (a fault, an unreadable file, a tier over its "
                "budget, a failing snapshot or checkpoint); cheap at thousands of workspaces",
                default=False,
            ),
        ),
        taskless=True,
        filtered=True,
        cli="status",
        mcp=Tool(
            "memory_status",
            "Health of the memd daemon and of each memory workspace you may read: token usage per tier against "
            "its budget, write faults, snapshot and checkpoint state. Use it when memory calls fail or to see "
            "how full memory is.",
            read_only=True,
            idempotent=True,
        ),
    ),
    Method(
        "metrics",
        "Prometheus metrics in the text exposition format",
        "admin",
        "`{text, content_type}`",
        workspace="none",
        taskless=True,
        cli="metrics",
    ),
    Method(
        "workspace.list",
        "the workspaces this daemon serves, with their directories and project directories",
        "public",
        "`{workspaces: [{name, path, project, usage}]}`",
        workspace="none",
        taskless=True,
        filtered=True,
        cli="workspaces",
    ),
    Method(
        "config.reload",
        "re-read the config file (parse, then swap)",
        "admin",
        "`{reloaded, errors, workspaces}`",
        workspace="none",
        cli="reload",
    ),
    Method(
        "session.start",
        "start or resume a session; returns the resume packet",
        "write",
        "the resume packet: task, step, pending actions, files, decisions, notes, learnings, activity, context",
        params=(
            Param(
                "task",
                "string",
                "what the agent works on; absent or the stored task resumes, a different one starts a fresh session",
                non_empty=True,
                max_len=4 * MAX_LABEL,
            ),
            Param(
                "session_id",
                "string",
                "the session's id; default: generated, sess-YYYYMMDD-HHMMSS-xxxx",
                non_empty=True,
                max_len=MAX_LABEL,
            ),
            Param("topic", "string", "selects the relevant learnings; default: the task"),
        ),
        taskless=True,
        cli="start-session",
        mcp=Tool(
            "resume_context",
            "Load what you remember about this project: the task, the current step, pending actions, files in "
            "flight, recent decisions and notes, relevant learnings and recent activity. Call it at the start of "
            "a session and after your context was compacted. Leave `task` out to resume; a different `task` "
            "starts a fresh session (the old one stays in the activity log and in history).",
            read_only=False,
        ),
    ),
    Method(
        "progress.update",
        "current step, files modified, pending actions",
        "write",
        "`{current_step, files_modified, pending_actions, not_pending, usage}`",
        params=(
            Param("step", "string", "the new current step (replaces the old one)", max_len=4 * MAX_LABEL),
            Param("files", "strings", "files modified, added to `files_modified`"),
            Param("pending_add", "strings", "actions added to `pending_actions`"),
            Param("pending_done", "strings", "actions removed from `pending_actions` (done)"),
        ),
        taskless=True,
        cli="progress",
        mcp=Tool(
            "update_progress",
            "Record where you are: the current step, files you modified, actions still to do (pending_add) and "
            "actions you finished (pending_done). Call it whenever the step changes, so a later session knows "
            "where to pick up.",
            read_only=False,
        ),
    ),
    Method(
        "decision.record",
        "a decision with its reason and risk",
        "write",
        "`{decision, usage}`",
        params=(
            Param("action", "string", "what was decided", required=True, non_empty=True, max_len=MAX_LABEL),
            Param("reason", "string", "why", required=True),
            Param("risk", "string", "what could go wrong, e.g. low", max_len=MAX_LABEL),
        ),
        taskless=True,
        cli="decide",
        mcp=Tool(
            "record_decision",
            "Record a decision you made, with its reason (and risk), so that a later session does not undo or "
            "re-argue it.",
            read_only=False,
        ),
    ),
    Method(
        "hot.note",
        "a working-context note",
        "write",
        "`{note, usage}`",
        params=(Param("text", "string", "the note", required=True, non_empty=True),),
        taskless=True,
        cli="note",
        mcp=Tool(
            "add_note",
            "Keep a short working-context note for this task (a finding, a gotcha, where something lives). Notes "
            "come back with the resume context until a checkpoint summarizes them.",
            read_only=False,
        ),
    ),
    Method(
        "hot.get",
        "the hot tier as stored and as rendered",
        "read",
        "`{hot, rendered, usage}`",
        taskless=True,
        cli="hot",
    ),
    Method(
        "warm.log",
        "append an entry to today's activity log",
        "write",
        "`{entry, usage}`",
        params=(
            Param(
                "action",
                "string",
                "what was done (the entry's heading)",
                required=True,
                non_empty=True,
                max_len=MAX_LABEL,
            ),
            Param("details", "details", "`key: value` details, in order (keys at most 512 characters)"),
            Param("result", "string", "the outcome (the entry's `Result:` line)"),
        ),
        taskless=True,
        cli="log",
        mcp=Tool(
            "log_activity",
            "Append an entry to today's activity log: what you did, optional key/value details (command, file, "
            "count) and the result. Log meaningful steps (tests run, a fix applied, a build), not every thought.",
            read_only=False,
        ),
    ),
    Method(
        "warm.recent",
        "the entries of the recent days",
        "read",
        "`{days: [{date, entries}], next, usage}`",
        params=(
            Param(
                "days",
                "integer",
                "calendar days counted back from today, today included; default `warm.recent_days`",
                minimum=1,
                maximum=3660,
            ),
            Param("limit", "integer", "most entries returned (the newest)", minimum=1, maximum=1000, default=100),
            Param("before", "string", "the `next` of the previous page: the page after it", max_len=40),
        ),
        taskless=True,
        cli="recent",
        mcp=Tool(
            "recent_activity",
            "What happened in this project over the last days: the activity log, newest first.",
            read_only=True,
            idempotent=True,
        ),
    ),
    Method(
        "warm.day",
        "one day's entries, from `warm/` or the archive",
        "read",
        "`{date, source, entries}`",
        params=(Param("date", "string", "a calendar date, YYYY-MM-DD", required=True, non_empty=True, max_len=10),),
        cli="day",
    ),
    Method(
        "retention.sweep",
        "remove or archive expired day files (or list them)",
        "write",
        "`{results: [{workspace, dry_run, expired, removed, ...}]}`",
        workspace="optional-admin",
        params=(
            Param("dry_run", "boolean", "list what would be removed, remove nothing", default=False),
            Param(
                "confirm",
                "boolean",
                "run it on a workspace adopted with day files, whose sweeps only report until one is confirmed",
                default=False,
            ),
        ),
        cli="sweep",
    ),
    Method(
        "cold.learn",
        "add a long-term learning",
        "write",
        "`{learning, usage}`",
        params=(
            Param(
                "category",
                "string",
                "its section in cold/MEMORY.md, e.g. Testing; surrounding whitespace is removed",
                required=True,
                non_empty=True,
                max_len=MAX_LABEL,
            ),
            Param("learning", "string", "the learning", required=True, non_empty=True),
        ),
        taskless=True,
        cli="learn",
        mcp=Tool(
            "learn",
            "Keep a long-term learning about this project (a convention, a pitfall, how to run something), filed "
            "under a category. Learnings outlive sessions and tasks: keep them true and general.",
            read_only=False,
        ),
    ),
    Method(
        "cold.get",
        "the learnings relevant to a topic, within budget",
        "read",
        "`{learnings, omitted, text, usage}`",
        params=(
            Param(
                "topic",
                "string",
                "words to match; absent (or no word of 2+ characters): every learning, newest first",
            ),
        ),
        cli="memory",  # not taskless: the topic ranking waits on the search index (memd.handlers.search)
        mcp=Tool(
            "relevant_learnings",
            "The long-term learnings about this project that match a topic (words), best match first.",
            read_only=True,
            idempotent=True,
        ),
    ),
    Method(
        "proposals.list",
        "the candidate learnings in cold/PROPOSED.md, waiting for a person to accept or reject them",
        "read",
        "`{proposals: [{id, category, date, text, from, kind, supersedes}]}`",
        taskless=True,
        cli="proposals",
    ),
    Method(
        "proposals.accept",
        "move a proposal into cold/MEMORY.md under its category (replacing the learning it supersedes)",
        "write",
        "`{accepted, replaced, usage}`",
        params=(_PROPOSAL_ID,),
        taskless=True,
        cli="accept",
    ),
    Method(
        "proposals.reject",
        "drop a proposal from cold/PROPOSED.md",
        "write",
        "`{rejected, usage}`",
        params=(_PROPOSAL_ID,),
        taskless=True,
        cli="reject",
    ),
    Method(
        "context.get",
        "the context payload, each tier within its token budget",
        "read",
        "`{text, usage, included, omitted, model_window}`",
        params=(
            _TOPIC,
            Param("all", "boolean", "everything, not trimmed to the tiers' token budgets", default=False),
            Param(
                "proposals",
                "boolean",
                "also the candidate learnings of cold/PROPOSED.md (outside every budget), after the tiers",
                default=False,
            ),
        ),
        cli="context",  # not taskless: the topic ranking waits on the search index (memd.handlers.search)
    ),
    Method(
        "memory.search",
        "ranked full-text search over hot, warm (archives included) and cold, in one or every readable workspace",
        "read",
        "`{query, workspaces, hits: [{workspace, tier, kind, file, date, time, lines, heading, snippet, score, "
        "match, id}], more}`",
        workspace="optional",
        params=(
            Param(
                "query",
                "string",
                'words (stemmed, all must match), "a phrase", prefix*, a OR b, -excluded',
                required=True,
                non_empty=True,
                max_len=2000,
            ),
            Param("tiers", "strings", "only these tiers: hot, warm, cold; default all", max_len=8, max_items=3),
            Param("since", "string", "only items dated on or after this day, YYYY-MM-DD", max_len=10),
            Param("until", "string", "only items dated on or before this day, YYYY-MM-DD", max_len=10),
            # 10, not 20: each hit is ~80 tokens of the caller's context window, and half the page is half the
            # snippets (~0.5 ms of a search at 100,000 entries, docs/benchmarks.md figure 9); Basic Memory's
            # search_notes pages by 10 too. More is one `limit` or `offset` away.
            Param("limit", "integer", "most hits returned", minimum=1, maximum=200, default=10),
            Param("offset", "integer", "hits skipped, for the next page", minimum=0, maximum=10_000, default=0),
        ),
        filtered=True,
        reads_index=True,
        taskless=True,
        cli="search",
        mcp=Tool(
            "search_memory",
            "Search everything this project's memory holds, beyond what the context window shows: notes, "
            "decisions, the activity log of every past day (archived ones too) and the learnings. Words match "
            'their variants (fix finds fixed); use "quotes" for a phrase, prefix*, OR, -exclude. Hits come best '
            "first, recent activity ahead of old, each with the file and lines it is at.",
            read_only=True,
            idempotent=True,
        ),
    ),
    Method(
        "memory.reindex",
        "build the search index of a workspace (or of every one) again from its files",
        "write",
        "`{workspaces: {name: documents}, seconds}`",
        workspace="optional-admin",
        cli="reindex",
    ),
    Method(
        "snapshot.run",
        "commit the workspace to its git history now",
        "write",
        "`{rev, created, snapshot}`",
        params=(
            Param(
                "reason",
                "string",
                "recorded as the commit's `Memd-Reason`; default `requested`",
                non_empty=True,
                max_len=MAX_LABEL,
            ),
        ),
        cli="snapshot",
    ),
    Method(
        "snapshot.restore",
        "bring files back to a snapshot, as a new commit",
        "write",
        "`{rev, restored, ..., usage}`",
        params=(_REV, _PATHS),
        cli="restore",
        mcp=Tool(
            "restore_snapshot",
            "Bring memory files back to how they were at a snapshot (a revision from `history`), as a new "
            "snapshot: what is overwritten stays in history. Only when the user asks to roll memory back.",
            read_only=False,
            destructive=True,
        ),
    ),
    Method(
        "snapshot.push",
        "push the snapshot history to its remote now",
        "write",
        "`{result, snapshot}`",
        cli="push",
    ),
    Method(
        "snapshot.sync",
        "fetch the remote's history, merge it into the workspace, push (two-way sync)",
        "write",
        "`{sync, snapshot}`",
        cli="sync",
    ),
    Method(
        "history.list",
        "snapshot commits, newest first",
        "read",
        "`{commits: [{rev, time, reason, subject, session, step}]}`",
        params=(
            Param(
                "path",
                "string",
                "only commits touching this path (`hot/context.json`, `warm`)",
                non_empty=True,
                max_len=MAX_LABEL,
            ),
            Param("limit", "integer", "most commits returned", minimum=1, maximum=10_000, default=50),
        ),
        cli="history",
        mcp=Tool(
            "history",
            "The snapshot history of this memory, newest first: when it was committed and why. A revision from "
            "here is what `restore_snapshot` takes.",
            read_only=True,
            idempotent=True,
        ),
    ),
    Method(
        "history.show",
        "a file as it was at a snapshot",
        "read",
        "`{content}`",
        params=(
            Param("rev", "string", "a revision", required=True, non_empty=True, max_len=MAX_LABEL),
            Param(
                "path",
                "string",
                "a file path in the repository, e.g. `hot/context.json`",
                required=True,
                non_empty=True,
                max_len=MAX_LABEL,
            ),
        ),
        cli="show",
    ),
    Method(
        "history.diff",
        "a diff between snapshots, or a snapshot and now",
        "read",
        "`{diff}`",
        params=(
            Param("rev", "string", "the old revision", required=True, non_empty=True, max_len=MAX_LABEL),
            Param(
                "rev2",
                "string",
                "the new revision; default: the files as they are now",
                non_empty=True,
                max_len=MAX_LABEL,
            ),
            _PATHS,
        ),
        cli="diff",
    ),
    Method(
        "checkpoint.run",
        "compact the hot tier now (summarize older notes and decisions)",
        "write",
        "`{checkpoint, usage}`",
        params=(
            Param(
                "force",
                "boolean",
                "true: run now whatever the threshold and the backoff; false: only when hot is over "
                "the threshold and not backing off",
                default=True,
            ),
        ),
        cli="checkpoint",
    ),
    Method(
        "checkpoint.list",
        "the workspace's checkpoint records and checkpoint health",
        "read",
        "`{checkpoints, status}`",
        cli="checkpoints",
        mcp=Tool(
            "list_checkpoints",
            "The checkpoints that compacted this memory's working context: when, how much, and their ids (what "
            "`undo_checkpoint` takes).",
            read_only=True,
            idempotent=True,
        ),
    ),
    Method(
        "checkpoint.show",
        "one checkpoint: what it replaced, its summary, how to undo it",
        "read",
        "`{summary, original_entries, undo, ...}`",
        params=(_CKPT_ID,),
        cli="checkpoint show",
    ),
    Method(
        "checkpoint.undo",
        "put back what a checkpoint compressed, keeping every write made since",
        "write",
        "`{undone, usage}`",
        params=(_CKPT_ID,),
        cli="checkpoint undo",
        mcp=Tool(
            "undo_checkpoint",
            "Put back the notes and decisions a checkpoint summarized (an id from `list_checkpoints`), keeping "
            "everything written since. Only when a summary lost something that matters.",
            read_only=False,
            destructive=True,
        ),
    ),
)

DECLARED: dict[str, Method] = {m.name: m for m in METHODS}
