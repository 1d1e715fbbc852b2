"""The composition root and lifecycle of `memd run`.

Builds token counters, workspaces and the socket server from the config and hands them down; nothing below
reads config files or the environment. Phases: start (lock, recover workspaces, listen, READY=1), run (signals
only enqueue; the loop handles them), stop (stop accepting, drain writes, STOPPING=1, remove the socket).
Reload is parse-then-swap: an invalid config is logged and the old one kept.

The event loop is picked, and logging set up, by memd.runtime (`daemon.loop`, or MEMD_LOOP, which wins).
The scheduled jobs are registered from the config by memd.daemon_jobs.schedule, handed this daemon, at start and
again after every reload; what each one does is there too (retention sweeps of many workspaces, bounded by
`daemon.sweep_concurrency`, and their lock order), and how `status` is assembled from the daemon-wide parts
handed down is in memd.status_report.
Imports memd (its version), memd.daemon_jobs, memd.listen, memd.malloc_tuning, memd.notify, memd.runtime,
memd.status_report, memd.changes, memd.checkpoint, memd.config, memd.early_ack, memd.errors, memd.handlers,
memd.jobs, memd.llm, memd.metrics, memd.promote_llm, memd.protocol, memd.registry, memd.search, memd.server,
memd.snapshots, memd.stoppable, memd.summarizer, memd.sync, memd.tokens, memd.workspace and memd.writer:
everything it wires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Collection, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memd import __version__, daemon_jobs, listen, malloc_tuning, notify, status_report
from memd.changes import Fanout
from memd.checkpoint import Checkpointer
from memd.config import Config, ServerConfig, WorkspaceConfig, load_config
from memd.early_ack import ReplyTo
from memd.errors import ConfigError, MemdError, StartupError
from memd.handlers import TASKLESS, Call, Peer, dispatch
from memd.jobs import Jobs
from memd.llm import OpenAISummarizer
from memd.metrics import Metrics
from memd.promote_llm import LlmPromoter
from memd.protocol import Request
from memd.registry import Registry
from memd.runtime import configure_logging, loop_factory, loop_name
from memd.search.service import SearchService
from memd.server import Limits, Server
from memd.snapshots import Snapshotter
from memd.stoppable import Stoppable
from memd.summarizer import ExtractiveSummarizer, Summarizer
from memd.sync import Syncer
from memd.tokens import TokenCounter
from memd.workspace import Workspace
from memd.writer import Completions

log = logging.getLogger("memd")

GIT_THREADS = 4  # snapshot git processes at once, over all workspaces (see Daemon.__init__)


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class Daemon:
    """Implements handlers.Services for the handlers."""

    def __init__(self, config: Config, config_path: Path | None, env: MutableMapping[str, str]) -> None:
        self.config = config
        self.config_path = config_path
        self.env = env
        self.own_uid = os.getuid()
        self.clock = SystemClock()
        self.metrics = Metrics(self.status)  # the daemon's own registry; measured where it happens, or from status
        self.io = ThreadPoolExecutor(max_workers=4, thread_name_prefix="memd-io")
        self.completions = Completions()  # batches the io threads finished, taken in before each request reads
        self.malloc: dict[str, object] = {}  # what `run` set of glibc's malloc (memd.malloc_tuning)
        # git has its own threads: a slow or hung git (timeouts up to a minute) must never delay an fsync. Four, on
        # two cores: a git process spends much of its life in fsync, and a first sweep of 300 workspaces left the
        # CPU 16% idle with two (8% with four; 7.9-8.6 -> 6.3-6.6 s, docs/benchmarks.md). One repository's commits
        # still go one at a time (its lock), so a workspace's writes never compete with more than one git of its own.
        self.git_io = ThreadPoolExecutor(max_workers=GIT_THREADS, thread_name_prefix="memd-git")
        # ...and a repack (seconds, at the lowest CPU priority) has one of its own: it never holds up a snapshot.
        self.gc_io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="memd-git-gc")
        self.background = Stoppable()  # the processes gc_io runs, which a stop ends rather than waits for
        self._counters: dict[str, TokenCounter] = {}
        self.snapshots = Snapshotter(
            config.snapshot, config.daemon.state_dir, self.git_io, config.snapshot.adopt_existing
        )
        # Two-way sync with snapshot.remote (`memd sync`; scheduled with snapshot.sync); git drivers run this python.
        self.syncer = Syncer(
            self.snapshots, config.snapshot, self.git_io, sys.executable, config.daemon.state_dir / "merge.attributes"
        )
        self.checkpoints = Checkpointer(
            config.checkpoint,
            self._summarizer(config),
            self.snapshots,
            config.llm.max_tokens_per_day,
            config.llm.deadline_seconds,
            time.monotonic,
            fallback=ExtractiveSummarizer(self._counter(config.budget.encoding)),
            spend_file=config.daemon.state_dir / "llm-spend.json",
        )
        self.promoter = self._promoter(config)  # [promote] backend; None: the extractive rules (memd.promote)
        # Derived state in the state dir; its listener only marks what changed (never on the ack path).
        self.search = SearchService(config.search, config.daemon.state_dir / "search.sqlite3")
        # The one change sink every workspace gets when it is made: git keeps the history (and commits before a
        # sweep deletes), checkpoints, snapshots and search hear what changed.
        listeners = (self.snapshots.on_change, self.checkpoints.on_change, self.search.on_change)
        self.changes = Fanout(self.snapshots, listeners)
        self.locks = listen.WorkspaceLocks()
        self._lock_of: dict[Workspace, tuple[int, int]] = {}
        self.registry = Registry(config, self._open_workspace, self._release_workspace, self.changes)
        self.jobs = Jobs(config.jobs, config.daemon.state_dir / "jobs.json")
        self._signals: asyncio.Queue[int] = asyncio.Queue()
        self._stop = asyncio.Event()
        self._lock_fd: int | None = None
        self.listener: listen.Listener | None = None
        self.server: Server | None = None
        self._retired: list[Server] = []  # servers of earlier socket paths, still serving their open connections
        self.notifier = notify.Notifier.from_env(env)
        self.started = time.time()
        self.last_reload: dict[str, Any] = {}

    # --- Services --------------------------------------------------------------------------------------------

    def workspaces(self) -> Mapping[str, Workspace]:
        return self.registry.workspaces

    def refused(self) -> Mapping[str, str]:
        return self.registry.refused

    async def sweep(self, workspace: str | None, dry_run: bool, confirm: bool = False) -> dict[str, Any]:
        targets = [self.registry.workspaces[workspace]] if workspace else list(self.registry.workspaces.values())
        outcomes = await daemon_jobs.sweep_each(
            targets, dry_run, confirm, concurrency=self.config.daemon.sweep_concurrency
        )
        failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failure is not None:  # every other workspace was swept; the first failure is the answer, as before
            raise failure
        return {"results": outcomes}

    def status(self, summary: bool = False, only: Collection[str] | None = None) -> dict[str, Any]:
        """The daemon's health (memd.status_report.assemble: `only`, the workspaces to report, None for all;
        `summary`, counts and only the workspaces with a problem)."""
        result: dict[str, Any] = {
            "version": __version__,
            "pid": os.getpid(),
            "uptime_seconds": round(time.time() - self.started, 1),
            "loop": loop_name(),
            "malloc": self.malloc,
            "socket": str(self.listener.path if self.listener else self.config.server.socket),
            "config": str(self.config_path) if self.config_path else "(embedded default)",
            "connections": len(self.server.connections) if self.server else 0,
            "server": dict(self.server.stats) if self.server else {},
            "last_reload": self.last_reload,
            "sync": self.registry.status(),
            "jobs": self.jobs.status(),
            "search": self.search.status(),
        }
        return status_report.assemble(
            result, self.registry.workspaces, self.snapshots, self.checkpoints, summary=summary, only=only
        )

    def metrics_text(self) -> bytes:
        return self.metrics.exposition()

    async def reload(self) -> dict[str, Any]:
        self._notify("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}")
        try:
            new = load_config(self.config_path, self.env)
            await self._apply(new)
        except ConfigError as exc:
            for line in exc.errors:
                log.error("reload rejected, keeping the running config: %s", line)
            result = {"reloaded": False, "errors": exc.errors}
        except MemdError as exc:
            log.error("reload rejected, keeping the running config: %s", exc.message)
            result = {"reloaded": False, "errors": [exc.message]}
        except Exception as exc:  # whatever went wrong, a reload never takes the daemon down
            log.exception("reload rejected, keeping the running config: unexpected error")
            result = {"reloaded": False, "errors": [f"unexpected error: {type(exc).__name__}: {exc} (see the log)"]}
        else:
            log.info("configuration reloaded (%d workspaces)", len(self.registry.workspaces))
            result = {"reloaded": True, "errors": [], "workspaces": sorted(self.registry.workspaces)}
            if self.registry.refused:
                result["refused"] = dict(self.registry.refused)
        self.last_reload = {"at": datetime.now(UTC).isoformat(timespec="seconds"), **result}
        self._notify("READY=1", self._status_line())
        return result

    # --- lifecycle -------------------------------------------------------------------------------------------

    async def run(self) -> int:
        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self._signals.put_nowait, sig)
        interval = notify.watchdog_interval(self.env, os.getpid())
        watchdog = asyncio.create_task(self._watchdog(interval)) if interval else None
        try:
            while not self._stop.is_set():
                signum = await self._signals.get()
                if signum == signal.SIGHUP:
                    await self.reload()
                else:
                    log.info("received %s, stopping", signal.Signals(signum).name)
                    self._stop.set()
        finally:
            if watchdog is not None:
                watchdog.cancel()
            await self.stop()
        return 0

    async def start(self) -> None:
        self._lock_fd = listen.take_lock(self.config.daemon.state_dir)  # held, never closed, for the daemon's life
        self.registry.start()
        await self.search.start(self.registry.workspaces.values())
        self.jobs.start()
        daemon_jobs.schedule(self)
        self.listener = listen.listen(self.config.server, self.env)
        self.server = self._new_server(self.config.server)
        await self.server.start(self.listener.sock)
        log.info(
            "memd %s listening on %s (%d workspaces)", __version__, self.listener.path, len(self.registry.workspaces)
        )
        self._notify("READY=1", self._status_line())

    async def stop(self) -> None:
        self._notify("STOPPING=1", "STATUS=stopping: draining writes")
        timeout = self.config.daemon.shutdown_timeout_seconds
        if self.server is not None:
            self.server.stop_accepting()
        self.jobs.shutdown()
        if (
            ended := self.background.stop()
        ):  # a `git gc` under way holds its repository's lock: the last snapshot needs it
            log.info("ended %d background git process(es) (a snapshot gc): memd is stopping", ended)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.checkpoints.drain(), min(timeout, 5.0))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.registry.close(), timeout)
        await self.search.close()  # derived state: what it had not indexed yet is indexed at the next start
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.snapshots.flush("shutdown"), timeout)
        if self.server is not None:
            await asyncio.gather(*(s.drain(timeout=1.0) for s in (self.server, *self._retired)))
        listen.remove(self.listener)
        self.io.shutdown(wait=True)
        self.git_io.shutdown(wait=False, cancel_futures=True)
        self.gc_io.shutdown(wait=False, cancel_futures=True)
        self.syncer.close()
        if self.notifier is not None:
            self.notifier.close()
        log.info("memd stopped")

    def request_stop(self) -> None:
        self._signals.put_nowait(signal.SIGTERM)

    # --- pieces ----------------------------------------------------------------------------------------------

    async def _dispatch(self, peer: Peer, request: Request, reply_to: ReplyTo | None) -> Any:
        self.completions.settle()  # a write its worker answered is published before this request reads anything
        return await dispatch(Call(self, peer, reply_to=reply_to), request.method, request.params)

    def _new_server(self, config: ServerConfig) -> Server:
        return Server(self._dispatch, self._authorize, _limits(config), TASKLESS, self.metrics.request)

    def _authorize(self, peer: Peer) -> bool:
        s = self.config.server
        return (
            peer.uid in (0, self.own_uid)
            or peer.uid in s.allowed_uids
            or peer.gid in s.allowed_gids
            or any(g in s.allowed_gids for g in peer.groups)
        )

    def _counter(self, encoding: str) -> TokenCounter:
        if encoding not in self._counters:
            self._counters[encoding] = TokenCounter.for_encoding(encoding)
        return self._counters[encoding]

    def _promoter(self, config: Config) -> LlmPromoter | None:
        if config.promote.backend != "openai":
            return None
        llm = config.llm
        client = OpenAISummarizer(
            llm.base_url, llm.model, self.env.get(llm.api_key_env, ""), llm.timeout_seconds, llm.max_retries,
            llm.redact_secrets,
        )  # fmt: skip
        spend = self.checkpoints
        return LlmPromoter(client, spend, llm.deadline_seconds, llm.redact_secrets, config.promote.max_prompt_tokens)

    def _summarizer(self, config: Config) -> Summarizer:
        llm = config.llm
        if llm.backend == "openai":
            return OpenAISummarizer(
                base_url=llm.base_url,
                model=llm.model,
                api_key=self.env.get(llm.api_key_env, ""),
                timeout=llm.timeout_seconds,
                max_retries=llm.max_retries,
                redact_secrets=llm.redact_secrets,
            )
        return ExtractiveSummarizer(self._counter(config.budget.encoding))

    def _open_workspace(self, ws_config: WorkspaceConfig) -> Workspace:
        """Take the workspace's lock, then open it (Registry's factory). Raises StartupError."""
        key = self.locks.acquire(ws_config.name, ws_config.path)
        try:
            ws = self._new_workspace(ws_config)
        except BaseException:
            self.locks.release(key)
            raise
        self._lock_of[ws] = key
        return ws

    def _release_workspace(self, ws: Workspace) -> None:
        key = self._lock_of.pop(ws, None)
        if key is not None:
            self.locks.release(key)

    def _new_workspace(self, ws_config: WorkspaceConfig) -> Workspace:
        ws = Workspace(
            ws_config,
            self._counter(ws_config.budget.encoding),
            self.clock,
            self.io,
            max_pending=self.config.server.max_pending_writes,
            sink=self.changes,
            limits=self.config.limits,
            on_batch=self.metrics.batch,
            completions=self.completions,
            adoption_file=self.config.daemon.state_dir / "workspaces" / f"{ws_config.name}.json",
            promoter=lambda: self.promoter,
        )
        try:
            removed = ws.open()
        except OSError as exc:
            raise StartupError(
                f"cannot open workspace {ws_config.name!r} at {ws_config.path}: {exc.strerror or exc}; "
                "fix the directory or its permissions, or remove it from the config"
            ) from exc
        for path in removed:
            log.info("workspace %s: removed stale temp file %s", ws_config.name, path)
        return ws

    async def _apply(self, new: Config) -> None:
        """Swap in a parsed config. Whatever can fail (token data, workspaces, a new socket, modes) is done first
        and undone when a later step fails, so a rejected reload leaves the daemon as it was; the swap cannot fail."""
        for ws_config in new.workspaces.values():
            self._counter(ws_config.budget.encoding)
        summarizer = self._summarizer(new)
        opened = self.registry.prepare(new)
        assert self.server is not None and self.listener is not None
        try:
            moved = await self._prepare_socket(new)
        except BaseException:
            self.registry.discard(opened)
            raise
        if moved is not None:
            (old_listener, old), (self.listener, self.server) = (self.listener, self.server), moved
            old.stop_accepting()
            listen.remove(old_listener)
            self._retired.append(old)  # its open connections are served to the end
        self.config = new
        self.server.reconfigure(_limits(new.server))
        await self.registry.apply(new, opened)
        self.snapshots.reconfigure(new.snapshot)
        self.syncer.reconfigure(new.snapshot)
        self.snapshots.prune(set(self.registry.workspaces))
        self.promoter = self._promoter(new)  # each workspace asks for it at its next sweep
        self.checkpoints.reconfigure(new.checkpoint, summarizer, new.llm.max_tokens_per_day, new.llm.deadline_seconds)
        self.jobs.reconfigure(new.jobs)
        self.search.reconfigure(new.search)
        daemon_jobs.schedule(self)
        self._retired = [s for s in self._retired if s.connections]
        for server in (self.server, *self._retired):
            server.recheck_peers()  # a uid the new config no longer allows is refused at its next request

    async def _prepare_socket(self, new: Config) -> tuple[listen.Listener, Server] | None:
        """Listen on a new socket path (returned with its server) or re-apply mode and group to the current one."""
        assert self.listener is not None
        if self.listener.activated:
            return None
        if new.server.socket == self.config.server.socket:
            listen.apply_permissions(self.listener.path, new.server)
            return None
        listener = listen.listen(new.server, self.env)
        server = self._new_server(new.server)
        try:
            await server.start(listener.sock)
        except BaseException:
            listener.sock.close()
            listen.remove(listener)
            raise
        return listener, server

    async def _watchdog(self, interval: float) -> None:
        while True:
            self._notify("WATCHDOG=1")
            await asyncio.sleep(interval)

    def _status_line(self) -> str:
        where = self.listener.path if self.listener else "-"
        return f"STATUS=serving {len(self.registry.workspaces)} workspaces on {where}"

    def _notify(self, *lines: str) -> None:
        if self.notifier is not None:
            self.notifier.send(*lines)


def _limits(server: ServerConfig) -> Limits:
    return Limits(
        server.max_request_bytes,
        server.max_connections,
        server.idle_timeout_seconds,
        server.request_timeout_seconds,
    )


def run(config_path: Path | None, env: MutableMapping[str, str]) -> int:
    """`memd run`: parse the config, pick the event loop, serve until stopped. Raises ConfigError, StartupError."""
    config = load_config(config_path, env)
    factory = loop_factory(env.get("MEMD_LOOP") or config.daemon.loop)
    malloc = malloc_tuning.tune(env)  # before any thread allocates: glibc makes arenas per thread
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(run_daemon(config_path, env, config, malloc))


async def run_daemon(
    config_path: Path | None,
    env: MutableMapping[str, str],
    config: Config | None = None,
    malloc: Mapping[str, object] | None = None,
) -> int:
    """Serve on the running loop (`run` picks it). `config`: already parsed from `config_path`; `malloc`: what
    `run` set of glibc's malloc (status shows it)."""
    config = config or load_config(config_path, env)
    configure_logging(config.daemon.log_level)
    daemon = Daemon(config, config_path, env)
    daemon.malloc = dict(malloc or {"applied": False, "reason": "not started by `memd run`"})
    try:
        return await daemon.run()
    except StartupError:
        daemon.io.shutdown(wait=False)
        daemon.git_io.shutdown(wait=False)
        daemon.gc_io.shutdown(wait=False)
        daemon.syncer.close()
        raise
