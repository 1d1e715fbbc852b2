"""What a protocol method is, declared once: its parameters, access kind, result, and how the front ends show it.

memd.methods holds one `Method` per protocol method; everything else derives from it: dispatch checks the access
kind and the parameters before a handler runs (memd.handlers), `Params` validates each value against its `Param`
(memd.params), the MCP tools take their JSON schemas and hints from here (memd.frontends.mcp_server), `memd call`
builds its options from the parameters (memd.cli_parser), and the method table of docs/protocol.md is `doc_table()` (a
test keeps the page in step). Imports nothing from memd: front ends read it without loading the daemon's code.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

# public: any accepted peer; admin: root or memd's uid; read/write: checked against the workspace's rules.
Access = Literal["public", "admin", "read", "write"]
# string | integer | boolean | strings (a list of strings; one string means a list of one) | details (an object
# of key: value pairs, values a string, number, boolean or null)
Kind = Literal["string", "integer", "boolean", "strings", "details"]
# Which workspace a method acts on. required: the one named (`workspace`), access-checked by dispatch. optional: the
# one named, or without a name every workspace the peer may read (the handler filters). optional-admin: the one
# named, or without a name every workspace, which only root and memd's uid may ask for. none: no workspace.
Scope = Literal["required", "optional", "optional-admin", "none"]

MAX_LABEL = 512  # actions, categories, keys, ids, revisions: one line in a heading or list item


@dataclass(frozen=True)
class Param:
    name: str
    kind: Kind
    doc: str
    required: bool = False
    non_empty: bool = False  # strings: not empty and not only whitespace
    max_len: int | None = None  # strings (each item, for lists): at most this many characters
    minimum: int | None = None
    maximum: int | None = None
    max_items: int | None = None
    default: str | int | bool | None = None  # what absence means, when it is a fixed value


@dataclass(frozen=True)
class Tool:
    """How a method appears to a model through MCP: a name for what an agent wants, and a description for it."""

    name: str
    description: str
    read_only: bool
    destructive: bool = False
    idempotent: bool = False


@dataclass(frozen=True)
class Method:
    name: str
    summary: str  # "what it does", in the protocol table
    access: Access
    result: str  # the result's shape, in a few words
    workspace: Scope = "required"
    params: tuple[Param, ...] = ()
    # The handler awaits only futures (Workspace.write's, a thread's): the server may run it without a Task.
    taskless: bool = False
    filtered: bool = False  # a public listing that shows each peer only the workspaces it may read
    # Answers from the search index, not the workspace's files: dispatch does not look for outside edits first (the
    # index holds those memd adopted, as a search across every workspace does; see docs/protocol.md).
    reads_index: bool = False
    cli: str | None = None  # the `memd` command that calls it (every method is also `memd call NAME`)
    mcp: Tool | None = None

    def param(self, name: str) -> Param:
        spec = self._by_name.get(name)
        if spec is None:  # a bug in a handler, not a client's error
            raise KeyError(f"{self.name} declares no parameter {name!r}")
        return spec

    def allowed(self) -> frozenset[str]:
        """The parameter names a request may carry."""
        return self._allowed

    # Computed once per declaration: dispatch asks on every request.
    @functools.cached_property
    def _by_name(self) -> dict[str, Param]:
        return {p.name: p for p in self.params}

    @functools.cached_property
    def _allowed(self) -> frozenset[str]:
        names = set(self._by_name)
        return frozenset(names | {"workspace"} if self.workspace != "none" else names)


# --- derived forms ---------------------------------------------------------------------------------------------


def param_schema(p: Param) -> dict[str, Any]:
    """The JSON schema of one parameter (what MCP clients validate against and models read)."""
    schema: dict[str, Any]
    if p.kind == "string":
        schema = {"type": "string"}
        if p.non_empty:
            schema["minLength"] = 1
        if p.max_len is not None:
            schema["maxLength"] = p.max_len
    elif p.kind == "integer":
        schema = {"type": "integer"}
        if p.minimum is not None:
            schema["minimum"] = p.minimum
        if p.maximum is not None:
            schema["maximum"] = p.maximum
    elif p.kind == "boolean":
        schema = {"type": "boolean"}
    elif p.kind == "strings":
        item: dict[str, Any] = {"type": "string", "minLength": 1}
        if p.max_len is not None:
            item["maxLength"] = p.max_len
        schema = {"type": "array", "items": item}
        if p.max_items is not None:
            schema["maxItems"] = p.max_items
    else:
        schema = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean", "null"]}}
    schema["description"] = p.doc
    if p.default is not None:
        schema["default"] = p.default
    return schema


WORKSPACE_DOC = "the workspace's name (`memd workspaces` lists them)"


def input_schema(
    method: Method, workspace_doc: str = WORKSPACE_DOC, workspace_required: bool | None = None
) -> dict[str, Any]:
    """The JSON schema of a method's parameters. `workspace_required` None: as the method declares it."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    if method.workspace != "none":
        properties["workspace"] = {"type": "string", "description": workspace_doc}
        if workspace_required if workspace_required is not None else method.workspace == "required":
            required.append("workspace")
    for p in method.params:
        properties[p.name] = param_schema(p)
        if p.required:
            required.append(p.name)
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def anchor(name: str) -> str:
    """The anchor of a method's `### \\`name\\`` heading in docs/protocol.md (as GitHub renders headings)."""
    return name.replace(".", "").lower()


def access_label(method: Method) -> str:
    return f"{method.access} (filtered)" if method.filtered else method.access


def doc_table(methods: Iterable[Method]) -> str:
    """The method table of docs/protocol.md, derived from the declarations."""
    rows = [
        "| method | access | what it does | CLI | MCP tool |",
        "|---|---|---|---|---|",
    ]
    for m in methods:
        cli = f"`memd {m.cli}`" if m.cli else "—"
        tool = f"`{m.mcp.name}`" if m.mcp else "—"
        rows.append(f"| [`{m.name}`](#{anchor(m.name)}) | {access_label(m)} | {m.summary} | {cli} | {tool} |")
    return "\n".join(rows) + "\n"
