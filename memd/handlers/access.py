"""Who is calling and what they may touch: the call context handlers receive, and the access rules.

Imports memd.checkpoint, memd.snapshots, memd.sync, memd.search, memd.workspace, memd.early_ack, memd.declare,
memd.params and memd.errors.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from memd.checkpoint import Checkpointer
from memd.declare import Access as Access  # re-exported: the access kinds are declared with the methods
from memd.early_ack import Answer, EarlyAck, ReplyTo
from memd.errors import AccessDenied, InvalidParams, UnknownWorkspace
from memd.params import Params
from memd.search.service import SearchService
from memd.snapshots import Snapshotter
from memd.sync import Syncer
from memd.workspace import Workspace


@dataclass(frozen=True, slots=True)
class Peer:
    pid: int
    uid: int
    gid: int
    groups: tuple[int, ...] = ()


class Services(Protocol):
    """What the daemon offers handlers (implemented by memd.daemon)."""

    own_uid: int
    snapshots: Snapshotter
    syncer: Syncer
    checkpoints: Checkpointer
    search: SearchService

    def workspaces(self) -> Mapping[str, Workspace]: ...

    def refused(self) -> Mapping[str, str]: ...  # configured workspaces not served (another daemon holds them)

    def status(self, summary: bool = False, only: Collection[str] | None = None) -> dict[str, Any]: ...

    def metrics_text(self) -> bytes: ...  # every metric in Prometheus' text exposition format

    async def reload(self) -> dict[str, Any]: ...

    async def sweep(self, workspace: str | None, dry_run: bool, confirm: bool = False) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Call:
    services: Services
    peer: Peer
    workspace: Workspace | None = None  # resolved and access-checked by dispatch, from the method's declaration
    reply_to: ReplyTo | None = None  # where a write's worker may send its answer itself (memd.early_ack)

    def early(self, answer: Answer) -> EarlyAck | None:
        """An early answer for this call, sent by the worker that has it (a write's, once durable; a search's
        query thread): `answer` makes the method's result from the worker's result (a write's edit result and
        the usage once its batch is published). None where nobody can be answered early (a notification, an
        in-process call)."""
        return None if self.reply_to is None else EarlyAck(self.reply_to, answer)

    @property
    def ws(self) -> Workspace:
        """The workspace of a method declared with one (dispatch checked the peer may use it)."""
        assert self.workspace is not None, "a handler of a method declared without a workspace asked for one"
        return self.workspace


Handler = Callable[[Call, Params], Awaitable[Any]]


def workspace_for(call: Call, raw: Mapping[str, Any], access: Access, refresh: bool = True) -> Workspace:
    name = raw.get("workspace")
    if not isinstance(name, str) or not name:
        raise InvalidParams(
            "missing parameter 'workspace' (a workspace name; see workspace.list)", data={"param": "workspace"}
        )
    ws = call.services.workspaces().get(name)
    if ws is None and name in call.services.refused():
        why = call.services.refused()[name] if privileged(call) else "another memd serves it (see status)"
        raise UnknownWorkspace(f"workspace {name!r} is not served by this memd: {why}", data={"workspace": name})
    if ws is None:
        raise UnknownWorkspace(
            f"no workspace named {name!r}; configured and discovered: "
            f"{', '.join(sorted(call.services.workspaces())) or 'none'}",
            data={"workspace": name},
        )
    if not may_access(call, ws, access):
        raise AccessDenied(
            f"uid {call.peer.uid} may not {'write to' if access == 'write' else 'read'} workspace {name!r}",
            data={"workspace": name, "uid": call.peer.uid},
        )
    if access == "read":
        ws.check_identity()  # a swapped-in directory is an error, never another workspace's files
        if refresh:
            ws.refresh()
    return ws


def privileged(call: Call) -> bool:
    return call.peer.uid in (0, call.services.own_uid)


def may_access(call: Call, ws: Workspace, access: Access) -> bool:
    """Per-workspace rules: with `writers`/`readers` lists set, only those uids (and root, memd's own uid)."""
    if privileged(call) or not (ws.config.writers or ws.config.readers):
        return True
    allowed = ws.config.writers if access == "write" else (*ws.config.readers, *ws.config.writers)
    return call.peer.uid in allowed


def result_with_usage(ws: Workspace, result: dict[str, Any]) -> dict[str, Any]:
    result["usage"] = ws.usage_dict()
    return result
