"""The `memd` command: parse, call the client (or run the daemon), format. `--json` for machines.

Exit codes: 0 success; 1 the daemon answered with an error; 2 usage error; 3 the daemon is not reachable;
4 invalid configuration. Only this module prints and picks exit codes. The commands and their arguments are
declared in memd.cli_parser.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memd.cli_call import CallUsageError, call_params
from memd.cli_format import human
from memd.cli_parser import build_parser
from memd.client import Client, DaemonNotRunning, find_socket
from memd.config import Config, config_to_toml, load_config
from memd.errors import UNKNOWN_WORKSPACE, ConfigError, MemdError
from memd.locate import config_file

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_CONFIG = 0, 1, 2, 3, 4


class UsageError(Exception):
    """A command line that argparse accepted but that does not make sense (exit 2)."""


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code not in (0, None) and _command_of(argv) == "hook":
            print("memd hook: bad command line (see `memd hook --help`); nothing done", file=sys.stderr)
            return EXIT_OK  # a hook never fails its host (exit 2 would block its action)
        raise
    env = dict(os.environ)
    config_path = config_file(env, args.config)
    if args.command == "hook":
        from memd.frontends import hook  # nothing of the daemon, and no MCP SDK: a hook starts fast

        workspace = args.workspace or env.get("MEMD_WORKSPACE") or None
        socket = lambda: find_socket(env, args.socket, config_path)  # noqa: E731 - its errors fail open in there
        return hook.run(
            args.event, args.host, socket, workspace, sys.stdin, sys.stdout, sys.stderr, args.timeout, args.max_chars
        )
    try:
        if args.command == "mcp":
            from memd.frontends.mcp_server import serve  # the MCP SDK is loaded only here

            return serve(find_socket(env, args.socket, config_path), args.workspace, env)
        if args.command == "config":
            return _config_command(args, config_path, env)
        if args.command == "run":
            from memd.daemon import run  # the daemon's imports are not needed by client commands

            try:
                return run(config_path, os.environ)
            except ConfigError:
                raise
            except MemdError as exc:
                print(f"memd: cannot start: {exc.message}", file=sys.stderr)
                return EXIT_ERROR
        config = load_config(config_path, env)  # an invalid file is refused (exit 4), as `memd run` would
        socket_path = find_socket(env, args.socket, config_path)  # what memd.client's users call too
        if args.command == "sockname":
            print(socket_path)
            return EXIT_OK
        with Client(socket_path) as client:
            return _client_command(args, client, config)
    except (UsageError, CallUsageError) as exc:
        print(f"memd: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ConfigError as exc:
        print(f"memd: {exc.message}", file=sys.stderr)
        return EXIT_CONFIG
    except DaemonNotRunning as exc:
        print(f"memd: {exc.message}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except MemdError as exc:
        print(f"memd: error {exc.code}: {exc.message}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as exc:  # the socket broke mid-call (daemon killed, timeout)
        print(f"memd: lost the connection to memd: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return 130


def _config_command(args: argparse.Namespace, config_path: Path | None, env: dict[str, str]) -> int:
    path = Path(args.file) if getattr(args, "file", None) else config_path
    config = load_config(path, env)
    if args.config_command == "check":
        names = ", ".join(config.workspaces)
        print(
            f"{path or '(embedded default)'}: ok, {len(config.workspaces)} workspace(s)"
            + (f": {names}" if names else "")
        )
    else:
        print(config_to_toml(config), end="")
    return EXIT_OK


def _command_of(argv: Sequence[str]) -> str | None:
    """The command word of a command line (the first argument that is neither an option nor an option's value)."""
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word in ("--config", "--socket"):
            skip = True
        elif not word.startswith("-"):
            return word
    return None


def _client_command(args: argparse.Namespace, client: Client, config: Config) -> int:
    cmd = args.command
    ws = getattr(args, "workspace", None)
    if cmd == "call":
        method, params = call_params(args)
        print(json.dumps(client.call(method, **params), indent=2, ensure_ascii=False))
        return EXIT_OK
    if cmd == "ping":
        result = client.call("ping")
    elif cmd == "status":
        result = client.call("status", **_drop_none(summary=args.summary or None))
    elif cmd == "metrics":
        result = client.call("metrics")
    elif cmd == "workspaces":
        result = client.call("workspace.list")
    elif cmd == "reload":
        result = client.call("config.reload")
    elif cmd == "start-session":
        result = client.call(
            "session.start",
            **_drop_none(workspace=ws, task=args.task, session_id=args.session_id, topic=args.topic),
        )
    elif cmd == "progress":
        result = client.call(
            "progress.update",
            **_drop_none(
                workspace=ws,
                step=args.step,
                files=args.files,
                pending_add=args.pending_add,
                pending_done=args.pending_done,
            ),
        )
    elif cmd == "decide":
        result = client.call(
            "decision.record",
            **_drop_none(workspace=ws, action=args.action, reason=args.reason, risk=args.risk),
        )
    elif cmd == "note":
        result = client.call("hot.note", workspace=ws, text=args.text)
    elif cmd == "log":
        details = dict(_split_detail(d) for d in args.detail)
        result = client.call(
            "warm.log",
            **_drop_none(workspace=ws, action=args.action, details=details or None, result=args.result),
        )
    elif cmd == "learn":
        result = client.call("cold.learn", workspace=ws, category=args.category, learning=args.text)
    elif cmd == "context":
        options = _drop_none(topic=args.topic, all=args.all or None, proposals=args.proposals or None)
        result = client.call("context.get", workspace=ws, **options)
    elif cmd == "memory":
        result = client.call("cold.get", **_drop_none(workspace=ws, topic=args.topic))
    elif cmd == "search":
        result = _search(client, args)
    elif cmd == "reindex":
        result = client.call("memory.reindex", **_drop_none(workspace=ws))
    elif cmd == "hot":
        result = client.call("hot.get", workspace=ws)
    elif cmd == "recent":
        result = client.call("warm.recent", **_drop_none(workspace=ws, days=args.days))
    elif cmd == "day":
        result = client.call("warm.day", workspace=ws, date=args.date)
    elif cmd == "proposals":
        result = client.call("proposals.list", workspace=ws)
    elif cmd in ("accept", "reject"):
        result = client.call(f"proposals.{cmd}", workspace=ws, id=args.id)
    elif cmd == "sweep":
        result = client.call(
            "retention.sweep", **_drop_none(workspace=ws, dry_run=args.dry_run, confirm=args.confirm or None)
        )
    elif cmd == "snapshot":
        result = client.call("snapshot.run", **_drop_none(workspace=ws, reason=args.reason))
    elif cmd == "history":
        result = client.call("history.list", **_drop_none(workspace=ws, path=args.path, limit=args.limit))
    elif cmd == "diff":
        result = client.call("history.diff", **_drop_none(workspace=ws, rev=args.rev, rev2=args.rev2))
    elif cmd == "show":
        rev, sep, path = args.spec.partition(":")
        if not sep or not path:
            raise UsageError(f"expected REV:PATH (e.g. HEAD~1:hot/context.json), not {args.spec!r}")
        result = client.call("history.show", workspace=ws, rev=rev, path=path)
    elif cmd == "restore":
        result = client.call("snapshot.restore", **_drop_none(workspace=ws, rev=args.rev, paths=args.paths))
    elif cmd == "push":
        result = client.call("snapshot.push", workspace=ws)
    elif cmd == "sync":
        result = client.call("snapshot.sync", workspace=ws)
    elif cmd == "checkpoint":
        words = args.words
        if words[0] == "show" and len(words) == 3:
            cmd = "checkpoint-show"
            result = client.call("checkpoint.show", workspace=words[1], id=words[2])
        elif words[0] == "undo" and len(words) == 3:
            cmd = "checkpoint-undo"
            result = client.call("checkpoint.undo", workspace=words[1], id=words[2])
        elif len(words) == 1:
            result = client.call("checkpoint.run", workspace=words[0], force=not args.if_needed)
        else:
            raise UsageError("usage: memd checkpoint WS  |  memd checkpoint show WS ID  |  memd checkpoint undo WS ID")
    elif cmd == "checkpoints":
        result = client.call("checkpoint.list", workspace=ws)
    else:  # argparse only admits the commands above
        raise AssertionError(cmd)
    try:
        print(json.dumps(result, indent=2, ensure_ascii=False) if args.json else human(cmd, result))
    except BrokenPipeError:  # `memd ... | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if cmd == "reload" and not result.get("reloaded"):
        return EXIT_ERROR
    if cmd == "progress" and result.get("not_pending"):
        # The rest of the update was applied; saying `ok` would hide that these were not marked done.
        pending = ", ".join(repr(a) for a in result.get("pending_actions", [])) or "none"
        missing = ", ".join(repr(a) for a in result["not_pending"])
        print(f"memd: not pending, so not marked done: {missing} (pending actions: {pending})", file=sys.stderr)
        return EXIT_ERROR
    if cmd == "push" and result.get("result") not in ("ok", "nothing to push"):
        return EXIT_ERROR
    if cmd == "sync" and (result.get("sync") or {}).get("state") != "ok":
        return EXIT_ERROR
    return EXIT_OK


def _search(client: Client, args: argparse.Namespace) -> Any:
    """`memd search [WS] QUERY`: with two or more words, the first is a workspace if memd serves one by that name
    (it says so: UnknownWorkspace), else every word is the query."""
    options = _drop_none(tiers=args.tiers, since=args.since, until=args.until, limit=args.limit, offset=args.offset)
    words: list[str] = args.words
    if len(words) > 1:
        try:
            return client.call("memory.search", workspace=words[0], query=" ".join(words[1:]), **options)
        except MemdError as exc:
            if exc.code != UNKNOWN_WORKSPACE:
                raise
    return client.call("memory.search", query=" ".join(words), **options)


def _drop_none(**kwargs: Any) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None and v != []}


def _split_detail(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise UsageError(f"--detail {text!r}: expected KEY=VALUE")
    return key, value


if __name__ == "__main__":
    sys.exit(main())
