"""Specification of the access rules handlers apply (memd.handlers.access): who may read or write a workspace,
what an unknown or refused workspace name tells whom, and that reads check the workspace first.

The services and workspaces are small stand-ins holding only what the rules read (a config with its reader and
writer lists; a record of the checks a read makes); the rules themselves are memd's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from memd.config import WorkspaceConfig
from memd.errors import AccessDenied, InvalidParams, UnknownWorkspace
from memd.handlers.access import Call, Peer, may_access, privileged, result_with_usage, workspace_for

MEMD_UID = 990
WRITER, READER, STRANGER = 1001, 1002, 1003


@dataclass
class Space:
    config: WorkspaceConfig
    checks: list[str] = field(default_factory=list)

    def check_identity(self) -> None:
        self.checks.append("identity")

    def refresh(self) -> None:
        self.checks.append("refresh")

    def usage_dict(self) -> dict[str, Any]:
        return {"hot": {"tokens": 1}}


@dataclass
class Services:
    spaces: dict[str, Space]
    refusals: dict[str, str] = field(default_factory=dict)
    own_uid: int = MEMD_UID

    def workspaces(self) -> Mapping[str, Space]:
        return self.spaces

    def refused(self) -> Mapping[str, str]:
        return self.refusals


@pytest.fixture
def services() -> Services:
    ruled = WorkspaceConfig("ruled", Path("/nonexistent/ruled"), readers=(READER,), writers=(WRITER,))
    readonly = WorkspaceConfig("readonly", Path("/nonexistent/ro"), readers=(READER,))
    return Services(
        {
            "open": Space(WorkspaceConfig("open", Path("/nonexistent/open"))),
            "ruled": Space(ruled),
            "readonly": Space(readonly),
        },
        {"held": "held by the memd with pid 4242 (/run/other.sock)"},
    )


def call(services: Services, uid: int) -> Call:
    return Call(services, Peer(pid=1, uid=uid, gid=uid))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("uid", "read", "write"),
    [(WRITER, True, True), (READER, True, False), (STRANGER, False, False), (0, True, True), (MEMD_UID, True, True)],
    ids=["writer", "reader", "stranger", "root", "memd"],
)
def test_listed_writers_read_and_write_listed_readers_only_read_and_root_and_memd_are_not_bound(
    services: Services, uid: int, read: bool, write: bool
) -> None:
    ws = services.spaces["ruled"]

    assert may_access(call(services, uid), ws, "read") is read  # type: ignore[arg-type]
    assert may_access(call(services, uid), ws, "write") is write  # type: ignore[arg-type]


def test_a_workspace_without_lists_is_open_to_every_peer_the_socket_admitted(services: Services) -> None:
    for access in ("read", "write"):
        assert may_access(call(services, STRANGER), services.spaces["open"], access) is True  # type: ignore[arg-type]


def test_readers_alone_close_writing_to_everyone_else(services: Services) -> None:
    ws = services.spaces["readonly"]

    assert may_access(call(services, READER), ws, "read") is True  # type: ignore[arg-type]
    assert may_access(call(services, READER), ws, "write") is False  # type: ignore[arg-type]
    assert may_access(call(services, STRANGER), ws, "read") is False  # type: ignore[arg-type]


def test_only_root_and_memds_own_uid_are_privileged(services: Services) -> None:
    assert [privileged(call(services, uid)) for uid in (0, MEMD_UID, WRITER, -1)] == [True, True, False, False]


def test_a_denied_write_names_the_uid_and_the_workspace(services: Services) -> None:
    with pytest.raises(AccessDenied) as caught:
        workspace_for(call(services, READER), {"workspace": "ruled"}, "write")

    assert caught.value.message == f"uid {READER} may not write to workspace 'ruled'"
    assert caught.value.data == {"workspace": "ruled", "uid": READER}


def test_a_denied_read_says_read(services: Services) -> None:
    with pytest.raises(AccessDenied) as caught:
        workspace_for(call(services, STRANGER), {"workspace": "ruled"}, "read")

    assert caught.value.message == f"uid {STRANGER} may not read workspace 'ruled'"
    assert services.spaces["ruled"].checks == [], "a denied peer must not make memd look at the files"


def test_a_read_checks_the_directory_is_still_the_workspace_and_refreshes_it_a_write_does_neither(
    services: Services,
) -> None:
    assert workspace_for(call(services, READER), {"workspace": "ruled"}, "read") is services.spaces["ruled"]
    assert services.spaces["ruled"].checks == ["identity", "refresh"]

    assert workspace_for(call(services, WRITER), {"workspace": "open"}, "write") is services.spaces["open"]
    assert services.spaces["open"].checks == []


@pytest.mark.parametrize("raw", [{}, {"workspace": ""}, {"workspace": 3}, {"workspace": None}])
def test_a_missing_or_non_string_workspace_name_is_invalid_params(services: Services, raw: dict[str, Any]) -> None:
    with pytest.raises(InvalidParams) as caught:
        workspace_for(call(services, WRITER), raw, "read")

    assert caught.value.data == {"param": "workspace"}
    assert caught.value.message == "missing parameter 'workspace' (a workspace name; see workspace.list)"


def test_an_unknown_name_lists_the_workspaces_there_are(services: Services) -> None:
    with pytest.raises(UnknownWorkspace) as caught:
        workspace_for(call(services, STRANGER), {"workspace": "nope"}, "read")

    assert caught.value.message == "no workspace named 'nope'; configured and discovered: open, readonly, ruled"
    assert caught.value.data == {"workspace": "nope"}


def test_with_no_workspace_at_all_the_answer_says_none() -> None:
    with pytest.raises(UnknownWorkspace) as caught:
        workspace_for(call(Services({}), STRANGER), {"workspace": "nope"}, "read")

    assert caught.value.message == "no workspace named 'nope'; configured and discovered: none"


def test_why_a_refused_workspace_is_not_served_is_told_only_to_privileged_peers(services: Services) -> None:
    with pytest.raises(UnknownWorkspace) as told:
        workspace_for(call(services, 0), {"workspace": "held"}, "read")
    with pytest.raises(UnknownWorkspace) as hidden:
        workspace_for(call(services, STRANGER), {"workspace": "held"}, "read")

    assert told.value.message == "workspace 'held' is not served by this memd: " + services.refusals["held"]
    assert hidden.value.message == "workspace 'held' is not served by this memd: another memd serves it (see status)"
    assert "4242" not in hidden.value.message
    assert told.value.data == hidden.value.data == {"workspace": "held"}


def test_a_result_carries_the_workspaces_usage(services: Services) -> None:
    result = result_with_usage(services.spaces["open"], {"ok": True})  # type: ignore[arg-type]

    assert result == {"ok": True, "usage": {"hot": {"tokens": 1}}}
