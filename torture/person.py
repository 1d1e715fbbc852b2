"""Scenario: a person edits the workspace's files by hand while agents write (contract 2, issue 12).

Several agent processes stream uniquely labelled writes into one workspace: torture/writer.py clients (warm.log
"w-K-n", hot.note "h-K-n", cold.learn "c-K-n" in category "CK", decision.record "d-K-n") and progress clients
(this file, `progress` mode: progress.update with step and files ["p-K-n"]). Meanwhile a **person** process (this
file, `edit` mode) edits the files at seeded random instants the way people and their editors do:

  hot-rename    a hot file: read, change, write a temp file, rename it over the original
  hot-inplace   a hot file rewritten in place (the inode it read truncated and rewritten, as O_TRUNC does)
  hot-vim       a hot file saved vim-style: original renamed to <name>~, new file written, ~ deleted
  cold-append   `>>` of a learning line "- [YYYY-MM-DD] person-N" to cold/MEMORY.md (lands under its last ## section)
  cold-rename   cold/MEMORY.md: a learning inserted at the end of an existing ## section, saved by rename-over
  cold-inplace  the same, rewritten in place
  cold-vim      the same, saved vim-style
  warm-append   `>>` of a full "### HH:MM:SS - person-N" entry (details and Result) to today's day file

Every hot edit adds a NEW top-level key `person_<n>` = "person-<n>" (all must survive); a quarter also set `task`,
a quarter rewrite an agent note's text to "<label> ~person-<n>" (that note's id must then hold the new text, and
the old text must be gone), a sixth delete an earlier person key (which must then be absent). Note edits are made
in hot/memd.json, where memd keeps the notes; the others in hot/context.json (the session's fields). A task
set by a later edit supersedes an earlier one: only the last task is checked. Each edit is valid for memd's
formats (docs/format.md): 2-space JSON, well-formed learning lines, warm entries exactly as memd renders them.

The person writes a ledger (JSON lines) of every edit that landed. At the end (daemon stopped cleanly) every
acknowledged agent write must be in its tier exactly once (a note the person rewrote counts under its new text),
and every person edit must be present (or absent, where the edit deleted something). Reported: "person edits: N
made, N kept", the agents' acknowledged writes and how many were lost, each loss named (label and file).

What the person does so that the oracle blames only memd: it saves the way editors do (its buffer, whatever the
file became meanwhile) but always knows what its save displaced, and excuses exactly that. A rename-over save
uses renameat2(RENAME_EXCHANGE), so the displaced file is in hand: when it is not the version the person read
(memd published in between), every label it held that the save lacks is excused (reported as a note, not as a
memd loss). A vim-style save checks, with the read descriptor still open (an inode number is reused at once
once freed), that the file it renamed to `~` is the one it read, else excuses what that file held; when memd
created the file in the instant it was missing, the save replaces it (as vim's would) and excuses what memd wrote
there. An in-place rewrite or a `>>` goes through the descriptor the person read and checks, before and after
writing, that the path still names that inode: one that landed on an inode memd had just replaced is redone.

    torture/person.py edit --root WS --ledger FILE --seed N --duration S [--gap-min A --gap-max B]
    torture/person.py progress --socket S --workspace W --client K --out DIR --duration S [--rate R]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import re
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

if __name__ != "__main__":  # the scenario side; the person and progress processes need the standard library only
    from torture import verify
    from torture.lib import PYTHON, Context, Daemon, Report, RpcError, Writers, base_config

KINDS = {
    "hot-rename": 3,
    "hot-inplace": 1,
    "hot-vim": 1,
    "cold-append": 2,
    "cold-rename": 1,
    "cold-inplace": 1,
    "cold-vim": 1,
    "warm-append": 2,
}
HOT = "hot/context.json"
HOT_OWN = "hot/memd.json"  # memd's own hot state: the notes a person rewrites
COLD = "cold/MEMORY.md"
AGENT_NOTE = re.compile(r"h-[0-9A-Za-z_]+-[0-9]+")
AT_FDCWD = -100
RENAME_EXCHANGE = 2
ATTEMPTS = 8

# --- the person and the progress agent (processes) ----------------------------------------------------------------


class Skip(Exception):
    """This edit cannot be made now (nothing to edit yet, a file mid-rewrite): no label is used, nothing recorded."""


_libc: Any = None


def exchange(a: Path, b: Path) -> None:
    """renameat2(a, b, RENAME_EXCHANGE): b gets a's file and a gets b's, atomically."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), str(b))


def read_fd(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def read_path(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        return read_fd(fd)
    finally:
        os.close(fd)


def write_new(path: Path, data: bytes, flags: int = os.O_CREAT | os.O_TRUNC) -> None:
    fd = os.open(path, os.O_WRONLY | flags, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def same_inode(path: Path, fd: int) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_ino, st.st_dev) == (own.st_ino, own.st_dev)


def hot_labels(data: bytes) -> set[str]:
    """Everything in a hot document that an oracle checks: agent note texts (edited ones under both names),
    decisions, files, person keys, the task."""
    try:
        doc = json.loads(data)
    except ValueError:
        return set()
    if not isinstance(doc, dict):
        return set()
    labels: set[str] = set()
    for note in doc.get("notes") or []:
        if isinstance(note, dict):
            text = str(note.get("text"))
            labels |= {text, text.split(" ~", 1)[0]}
    labels |= {str(d.get("action")) for d in doc.get("decisions") or [] if isinstance(d, dict)}
    labels |= {str(f) for f in doc.get("files_modified") or []}
    labels |= {k for k in doc if k.startswith("person_")}
    labels.add(f"task={doc.get('task')}")
    return labels


def cold_labels(data: bytes) -> set[str]:
    out = set()
    for line in data.decode("utf-8", "replace").split("\n"):
        if line.startswith("- [") and "] " in line:
            out.add(line.split("] ", 1)[1])
    return out


Make = Callable[[bytes], tuple[bytes, dict[str, Any]]]


@dataclass
class Person:
    root: Path
    ledger_fd: int
    rng: random.Random
    t0: float
    n: int = 0
    made: Counter[str] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)

    def record(self, obj: dict[str, Any]) -> None:
        os.write(self.ledger_fd, (json.dumps(obj, sort_keys=True) + "\n").encode())

    def excuse(self, n: int, labels: set[str], why: str) -> None:
        if labels:
            self.record({"excuse": sorted(labels), "edit": n, "why": why})

    # one edit

    def edit(self, kind: str) -> None:
        self.n += 1
        n, label = self.n, f"person-{self.n}"
        choice = self.rng.choices(["key", "task", "note", "delete"], [4, 3, 3, 2])[0]
        pick = self.rng.randrange(1 << 30)
        t = time.monotonic() - self.t0
        tier, _, how = kind.partition("-")
        path = self.root / ((HOT_OWN if choice == "note" else HOT) if tier == "hot" else COLD)
        make = self.hot_make(n, label, choice, pick) if tier == "hot" else self.cold_make(label, pick)
        labels = hot_labels if tier == "hot" else cold_labels
        if kind == "warm-append":
            effects = self.warm_append(label)
            attempts = 1
        elif kind == "cold-append":
            effects, attempts = self.cold_append(n, label)
        elif how == "rename":
            effects, attempts = self.save_exchange(n, path, make, labels)
        elif how == "inplace":
            effects, attempts = self.save_inplace(n, path, make)
        else:
            effects, attempts = self.save_vim(n, path, make, labels)
        self.made[kind] += 1
        record = {"edit": n, "label": label, "kind": kind, "t": round(t, 3), "effects": effects, "attempts": attempts}
        self.record(record)

    # what an edit changes

    def hot_make(self, n: int, label: str, choice: str, pick: int) -> Make:
        plan: dict[str, Any] = {}

        def make(data: bytes) -> tuple[bytes, dict[str, Any]]:
            try:
                doc = json.loads(data)
            except ValueError:
                raise Skip("the hot file is not valid JSON right now") from None
            if not isinstance(doc, dict):
                raise Skip("the hot file is not an object")
            key = f"person_{n}"
            doc[key] = label
            effects: dict[str, Any] = {"key": key, "value": label}
            notes = [x for x in doc.get("notes") or [] if isinstance(x, dict)]
            if choice == "task":
                doc["task"] = effects["task"] = f"task set by {label}"
            elif choice == "note":
                if "note" not in plan:
                    found = [x for x in notes if AGENT_NOTE.fullmatch(str(x.get("text"))) and x.get("id")]
                    chosen = found[pick % len(found)] if found else None
                    plan["note"] = chosen and {"id": chosen["id"], "from": chosen["text"]}
                if plan["note"]:
                    note = next((x for x in notes if x.get("id") == plan["note"]["id"]), None)
                    new_text = f"{plan['note']['from']} ~{label}"
                    if note is not None and note.get("text") in (plan["note"]["from"], new_text):
                        note["text"] = new_text
                        effects["note"] = {**plan["note"], "to": new_text}
            elif choice == "delete":
                if "delete" not in plan:
                    keys = sorted(k for k in doc if k.startswith("person_") and k != key)
                    plan["delete"] = keys[pick % len(keys)] if keys else None
                if plan["delete"]:
                    doc.pop(plan["delete"], None)
                    effects["deleted"] = plan["delete"]
            return (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode(), effects

        return make

    def cold_make(self, label: str, pick: int) -> Make:
        plan: dict[str, str] = {}
        line = f"- [{datetime.now(UTC).date().isoformat()}] {label}"

        def make(data: bytes) -> tuple[bytes, dict[str, Any]]:
            text = data.decode("utf-8")
            if not text.endswith("\n"):
                raise Skip("cold/MEMORY.md does not end with a newline (mid-rewrite)")
            lines = text[:-1].split("\n")
            headings = [i for i, x in enumerate(lines) if x.startswith("## ")]
            if not headings:
                raise Skip("no ## section in cold/MEMORY.md yet")
            if "category" not in plan:
                plan["category"] = lines[headings[pick % len(headings)]][3:].strip()
            effects = {"learning": label, "category": plan["category"]}
            if line in lines:
                return data, effects
            at = next((i for i in headings if lines[i][3:].strip() == plan["category"]), None)
            if at is None:
                raise Skip(f"section {plan['category']!r} is gone")
            end = next((i for i in headings if i > at), len(lines))
            while end - 1 > at and not lines[end - 1]:
                end -= 1
            lines.insert(end, line)
            return ("\n".join(lines) + "\n").encode(), effects

        return make

    # how it is saved

    def save_exchange(self, n: int, path: Path, make: Make, labels: Callable[[bytes], set[str]]) -> tuple[Any, int]:
        """Write a temp file and swap it in (what an editor's save does), knowing exactly what the save displaced."""
        base = read_path(path)
        new, effects = make(base)
        displaced = self.swap_in(n, path, new)
        if displaced != base:  # memd published between the read and the save: the save clobbered that
            self.events["save displaced a file it had not read"] += 1
            self.excuse(n, labels(displaced) - labels(new), "the person's save displaced a file it had not read")
        return effects, 1

    def swap_in(self, n: int, path: Path, data: bytes) -> bytes:
        """Put `data` at `path` through a temp file and RENAME_EXCHANGE; returns the file it displaced."""
        tmp = path.with_name(f".{path.name}.person-{n}")
        write_new(tmp, data)
        exchange(tmp, path)
        displaced = read_path(tmp)
        os.unlink(tmp)
        fsync_dir(path.parent)
        return displaced

    def save_inplace(self, n: int, path: Path, make: Make) -> tuple[Any, int]:
        """Rewrite the inode it read (O_TRUNC semantics); redo when memd replaced the file under the write."""
        for attempt in range(1, ATTEMPTS + 1):
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW)
            try:
                base = read_fd(fd)
                new, effects = make(base)
                if not same_inode(path, fd):
                    continue  # replaced since it was opened: read again, nothing written
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, new)
                os.fsync(fd)
                if same_inode(path, fd):
                    return effects, attempt
                self.events["in-place write orphaned by a concurrent replace (redone)"] += 1
            finally:
                os.close(fd)
        raise Skip("in-place rewrite kept being replaced")

    def save_vim(self, n: int, path: Path, make: Make, labels: Callable[[bytes], set[str]]) -> tuple[Any, int]:
        # the descriptor stays open until the rename was checked: a closed, unlinked inode's number can be reused
        # at once by memd's next temp file, and the check would then pass for a file the person never read
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            base = read_fd(fd)
            new, effects = make(base)
            backup = path.with_name(path.name + "~")
            os.rename(path, backup)
            if not same_inode(backup, fd):  # memd published between the read and the rename: the save clobbers it
                self.events["vim-style save replaced a file it had not read"] += 1
                why = "the vim-style save replaced a file it had not read"
                self.excuse(n, labels(read_path(backup)) - labels(new), why)
        finally:
            os.close(fd)
        try:
            write_new(path, new, os.O_CREAT | os.O_EXCL)
        except FileExistsError:  # memd created the file in the backup gap: the save replaces it, as vim's would
            self.events["backup-gap collision (memd created the file while it was renamed away)"] += 1
            displaced = self.swap_in(n, path, new)
            self.excuse(n, labels(displaced) - labels(new), "the vim-style save replaced what memd wrote in its gap")
        os.unlink(backup)
        fsync_dir(path.parent)
        return effects, 1

    def cold_append(self, n: int, label: str) -> tuple[Any, int]:
        path = self.root / COLD
        line = f"- [{datetime.now(UTC).date().isoformat()}] {label}\n".encode()
        for attempt in range(1, ATTEMPTS + 1):
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW)
            try:
                text = read_fd(fd).decode("utf-8")
                if not text.endswith("\n"):
                    raise Skip("cold/MEMORY.md does not end with a newline")
                headings = [x[3:].strip() for x in text.split("\n") if x.startswith("## ")]
                if not headings:
                    raise Skip("no ## section yet")
                if not same_inode(path, fd):
                    continue
                os.write(fd, line)
                os.fsync(fd)
                if same_inode(path, fd):
                    return {"learning": label, "category": headings[-1]}, attempt
                self.events["append orphaned by a concurrent replace (redone)"] += 1
            finally:
                os.close(fd)
        raise Skip("append kept being replaced")

    def warm_append(self, label: str) -> dict[str, Any]:
        now = datetime.now(UTC)
        day = f"{now.date().isoformat()}.md"
        path = self.root / "warm" / day
        if not path.is_file():
            raise Skip(f"no warm/{day} yet")
        entry = f"### {now.strftime('%H:%M:%S')} - {label}\n```\nby: person\n```\nResult: typed by hand\n\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        try:
            os.write(fd, entry.encode())  # one write on O_APPEND: never interleaved with memd's appends
            os.fsync(fd)
        finally:
            os.close(fd)
        return {"entry": label, "day": day}


def person_main(args: argparse.Namespace) -> int:
    rng = random.Random(f"{args.seed}:person")
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    person = Person(Path(args.root), os.open(args.ledger, flags, 0o644), rng, time.monotonic())
    deadline = person.t0 + args.duration
    kinds, weights = list(KINDS), list(KINDS.values())
    skipped: Counter[str] = Counter()
    while True:
        time.sleep(rng.uniform(args.gap_min, args.gap_max))
        if time.monotonic() >= deadline:
            break
        kind = rng.choices(kinds, weights)[0]
        try:
            person.edit(kind)
        except Skip as exc:
            skipped[str(exc)] += 1
        except OSError as exc:
            person.events[f"{kind}: {type(exc).__name__}: {exc}"] += 1
    person.record({"summary": {"made": dict(person.made), "events": dict(person.events), "skipped": dict(skipped)}})
    return 0


def progress_main(args: argparse.Namespace) -> int:
    """An agent streaming progress.update (step and one new file "p-K-n" each), one request at a time."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    sent_fd, ack_fd, err_fd = (os.open(os.path.join(args.out, f"{args.client}.{x}"), flags, 0o644) for x in
                               ("sent", "ack", "err"))  # fmt: skip
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(60)
    sock.connect(args.socket)
    reader = sock.makefile("rb")
    start = time.monotonic()
    n = 0
    try:
        while time.monotonic() - start < args.duration:
            n += 1
            label = f"p-{args.client}-{n}"
            params = {"workspace": args.workspace, "step": label, "files": [label]}
            os.write(sent_fd, f"{label}\n".encode())
            request = {"jsonrpc": "2.0", "id": n, "method": "progress.update", "params": params}
            sock.sendall(json.dumps(request).encode() + b"\n")
            line = reader.readline()
            if not line:
                break
            response = json.loads(line)
            if "result" in response:
                os.write(ack_fd, f"{label}\t-\n".encode())
            else:
                err = response.get("error") or {}
                message = str(err.get("message", "")).replace("\n", " ")[:300]
                os.write(err_fd, f"{label}\t{err.get('code')}\t{message}\n".encode())
            if args.rate:
                time.sleep(max(0.0, start + n / args.rate - time.monotonic()))
    except (OSError, ValueError):
        pass
    finally:
        sock.close()
    return 0


# --- the scenario ---------------------------------------------------------------------------------------------------

BIG_BUDGET = {  # no checkpoint: every note stays in hot, so the oracle is exact
    "model_window": 4_000_000,
    "hot": 1_000_000,
    "warm": 1_000_000,
    "cold": 1_000_000,
    "checkpoint_threshold": 1.0,
    "checkpoint_target": 0.5,
}
LABEL = re.compile(r"([whcdp])-([0-9A-Za-z_]+)-([0-9]+)")


@dataclass
class RoundResult:
    made: Counter[str] = field(default_factory=Counter)
    kept: Counter[str] = field(default_factory=Counter)
    acked: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    lost_edits: list[str] = field(default_factory=list)
    excused: list[str] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)
    log_lines: Counter[str] = field(default_factory=Counter)  # warnings and errors in the daemon log, by kind


def run(ctx: Context) -> Report:
    report = Report("person")
    rounds = ctx.size(2, 1)
    duration = ctx.seconds(15.0, 5.0)
    total = RoundResult()
    for r in range(rounds):
        result = one_round(ctx, report, r, duration)
        for name in ("made", "kept", "acked", "errors", "events", "log_lines"):
            getattr(total, name).update(getattr(result, name))
        total.lost += result.lost
        total.lost_edits += result.lost_edits
        total.excused += result.excused
    made, kept, acked = sum(total.made.values()), sum(total.kept.values()), sum(total.acked.values())
    report.figure("rounds", f"{rounds} x {duration:.0f} s")
    report.figure("person edits", f"{made} made, {kept} kept")
    report.figure("by kind", ", ".join(f"{k} {total.kept[k]}/{total.made[k]}" for k in KINDS if total.made[k]))
    report.figure(
        "acked writes",
        f"{acked:,} ({', '.join(f'{k} {v:,}' for k, v in sorted(total.acked.items()))}), {len(total.lost)} lost",
    )
    if total.errors:
        report.figure("refused writes", ", ".join(f"{code}: {n}" for code, n in total.errors.most_common()))
    if total.events:
        report.figure("person races", "; ".join(f"{what}: {n}" for what, n in sorted(total.events.items())))
    if total.log_lines:
        report.notes.append("daemon log: " + "; ".join(f"{n} x {line}" for line, n in total.log_lines.most_common(4)))
    if total.excused:
        report.notes.append(
            f"{len(total.excused)} losses were the person's own doing (a save over a file it had not read, or over "
            f"what memd wrote in a vim backup gap) and are not counted: {', '.join(total.excused[:8])}"
        )
    if total.lost:
        where = Counter(x.split(" missing from ", 1)[-1].split(" ## ")[0] for x in total.lost)
        breakdown = ", ".join(f"{place} {n}" for place, n in where.most_common())
        report.fail(f"{len(total.lost)} acknowledged agent writes lost ({breakdown}):\n" + "\n".join(total.lost[:25]))
    if total.lost_edits:
        report.fail(f"{len(total.lost_edits)} of {made} person edits lost:\n" + "\n".join(total.lost_edits[:25]))
    report.count("person_made", made)
    report.count("person_kept", kept)
    report.count("person_acked", acked)
    report.count("person_lost", len(total.lost))
    report.summary = f"person edits: {made} made, {kept} kept; {acked:,} acked writes, {len(total.lost)} lost"
    return report


def one_round(ctx: Context, report: Report, r: int, duration: float) -> RoundResult:
    rng = ctx.rng(f"person-{r}")
    root = ctx.dir("person")
    name = f"pw{r}"
    ws = root / "ws" / name
    out = root / "acks"
    out.mkdir()
    ledger_path = root / "person.jsonl"
    d = Daemon(ctx, root / "d", base_config(root, {name: ws}, budget=BIG_BUDGET))
    writers: Writers | None = None
    result = RoundResult()
    try:
        d.start()
        labelled_writes(d, name, out, f"seed{r}")  # every file, and a ## section, exist before the person starts
        clients = [f"a{r}x{j}" for j in range(ctx.size(4, 3))]
        writers = Writers(
            ctx, d.socket_path, name, out, clients, [rng.choice((1, 2, 4)) for _ in clients],
            mix="w=3,h=3,c=2,d=2", extra=["--duration", f"{duration:.1f}", "--rate", "40"],
        )  # fmt: skip
        env = ctx.env()
        me = [PYTHON, __file__]
        progress = [
            [*me, "progress", "--socket", str(d.socket_path), "--workspace", name, "--client", f"p{r}x{j}",
             "--out", str(out), "--duration", f"{duration:.1f}", "--rate", "25"]
            for j in range(2)
        ]  # fmt: skip
        person = [*me, "edit", "--root", str(ws), "--ledger", str(ledger_path), "--seed", f"{ctx.seed * 100 + r}",
                  "--duration", f"{duration * 0.9:.1f}"]  # fmt: skip
        with open(out / "others.stderr", "ab") as errlog:
            others = [ctx.procs.spawn(a, env=env, stdout=subprocess.DEVNULL, stderr=errlog) for a in progress]
            writers.go()
            others.append(ctx.procs.spawn(person, env=env, stdout=subprocess.DEVNULL, stderr=errlog))
        killed = writers.wait(duration + 60)
        for proc in others:
            try:
                proc.wait(max(5.0, duration + 30))
            except subprocess.TimeoutExpired:
                proc.kill()
                killed += 1
        report.check(killed == 0, f"round {r}: {killed} client or person processes did not end in time")
        labelled_writes(d, name, out, f"final{r}")  # after the person's last edit: the next batch must keep it
        rc = d.stop()
        report.check(rc == 0, f"round {r}: daemon stopped with {rc}:\n{d.log_tail(10)}")
        for line in d.log_text().splitlines():
            if line.startswith(("WARNING", "ERROR", "CRITICAL", "Traceback")):
                result.log_lines[re.sub(r"/tmp/\S+", "...", line)[:160]] += 1
    except (RuntimeError, RpcError, OSError) as exc:
        report.fail(f"round {r}: {type(exc).__name__}: {exc}\n{d.log_tail(10)}")
        return result
    finally:
        if writers is not None:
            writers.close()
        d.close()
    check_round(report, r, ws, out, ledger_path, result)
    return result


def labelled_writes(d: Daemon, name: str, out: Path, client: str) -> None:
    """One acknowledged write per tier, recorded in the ack ledger like a writer's."""
    calls: list[tuple[str, str, dict[str, Any]]] = [
        (f"w-{client}-1", "warm.log", {"action": f"w-{client}-1"}),
        (f"h-{client}-2", "hot.note", {"text": f"h-{client}-2"}),
        (f"c-{client}-3", "cold.learn", {"category": f"C{client}", "learning": f"c-{client}-3"}),
        (f"p-{client}-4", "progress.update", {"step": f"p-{client}-4", "files": [f"p-{client}-4"]}),
    ]
    with open(out / f"{client}.sent", "a") as sent, open(out / f"{client}.ack", "a") as ack:
        for label, method, params in calls:
            sent.write(label + "\n")
            sent.flush()
            d.call(method, workspace=name, **params)
            ack.write(f"{label}\t-\n")


def check_round(report: Report, r: int, ws: Path, out: Path, ledger_path: Path, result: RoundResult) -> None:
    state = verify.inspect(ws, strict=True)
    for problem in state.problems:
        report.fail(f"round {r}: {problem}")
    leftovers = [f"{t}/{n}" for t in ("hot", "cold") for n in os.listdir(ws / t) if "person" in n or n.endswith("~")]
    report.check(not leftovers, f"round {r}: the person left files behind (harness error): {leftovers}")
    ledger = verify.Ledger().load(out)
    for line in ledger.errors:
        parts = line.split("\t")
        result.errors[parts[1] if len(parts) > 1 else "?"] += 1
    if not ledger_path.exists():
        errors = (out / "others.stderr").read_text(errors="replace")[-1500:]
        report.fail(f"round {r}: the person process wrote no ledger (it did not start); its stderr:\n{errors}")
        return
    records = [json.loads(line) for line in ledger_path.read_text().splitlines() if line.strip()]
    edits = [x for x in records if "label" in x]
    excused: dict[str, int] = {}
    for x in records:
        if "excuse" in x:
            excused.update(dict.fromkeys(x["excuse"], x["edit"]))
        if "summary" in x:
            result.events.update(x["summary"]["events"])
    if not any("summary" in x for x in records):
        report.fail(f"round {r}: the person process did not finish its ledger (see {out / 'others.stderr'})")

    # every acknowledged agent write, exactly once in its tier
    doc = state.hot or {}
    warm = Counter(e.action for e in state.entries)
    notes = Counter(str(x.get("text")).split(" ~", 1)[0] for x in state.notes)
    decisions = Counter(str(x.get("action")) for x in state.decisions)
    cold = Counter((lr.category, lr.text) for lr in state.learnings)
    files = Counter(str(f) for f in doc.get("files_modified") or [])
    for label in sorted(ledger.sent):
        match = LABEL.fullmatch(label)
        if match is None:
            continue
        kind, client = match[1], match[2]
        places = {
            "w": [("warm", warm[label])],
            "h": [("hot notes", notes[label])],
            "c": [(f"cold ## C{client}", cold[(f"C{client}", label)])],
            "d": [("hot decisions", decisions[label]), ("warm", warm[f"decision: {label}"])],
            "p": [("hot files_modified", files[label])],
        }[kind]
        acked = label in ledger.acked
        result.acked[kind] += int(acked)
        for where, count in places:
            if count > 1:
                report.fail(f"round {r}: {label} appears {count} times in {where}")
            elif count == 0 and acked:
                text = f"round {r}: acked {label} missing from {where}"
                (result.excused if label in excused else result.lost).append(text)

    # every person edit, present (or absent where it deleted something)
    last_task = max((x["edit"] for x in edits if "task" in x["effects"]), default=None)
    last_note_edit: dict[str, int] = {}
    deleted_by: dict[str, int] = {}
    for x in edits:
        if "note" in x["effects"]:
            last_note_edit[x["effects"]["note"]["id"]] = x["edit"]
        if "deleted" in x["effects"]:
            deleted_by[x["effects"]["deleted"]] = x["edit"]
    notes_by_id = {str(x.get("id")): x for x in state.notes}
    for x in edits:
        n, kind, eff = x["edit"], x["kind"], x["effects"]
        problems = edit_problems(state, doc, n, kind, eff, last_task, last_note_edit, deleted_by, notes_by_id)
        result.made[kind] += 1
        if not problems:
            result.kept[kind] += 1
            continue
        own = {eff.get("key"), f"task={eff.get('task')}", (eff.get("note") or {}).get("to"), eff.get("learning")}
        text = f"round {r}: person edit {n} ({kind}, +{x['t']:.2f} s, label {x['label']}): {'; '.join(problems)}"
        (result.excused if own & set(excused) else result.lost_edits).append(text)


def edit_problems(
    state: verify.WsState,
    doc: dict[str, Any],
    n: int,
    kind: str,
    eff: dict[str, Any],
    last_task: int | None,
    last_note_edit: dict[str, int],
    deleted_by: dict[str, int],
    notes_by_id: dict[str, dict[str, Any]],
) -> list[str]:
    problems: list[str] = []
    if kind.startswith("hot"):
        key = eff["key"]
        if deleted_by.get(key, 0) <= n and doc.get(key) != eff["value"]:
            problems.append(f"key {key} missing from hot/" if key not in doc else f"{key} is {doc[key]!r}")
        if "task" in eff and n == last_task and doc.get("task") != eff["task"]:
            problems.append(f"task is {doc.get('task')!r}, not the person's last {eff['task']!r}")
        note = eff.get("note")
        if note and last_note_edit.get(note["id"]) == n:
            found = notes_by_id.get(note["id"])
            if found is None:
                problems.append(f"note {note['id']} (edited to {note['to']!r}) is gone")
            elif found.get("text") != note["to"]:
                problems.append(f"note {note['id']} has text {found.get('text')!r}, not the person's {note['to']!r}")
        if "deleted" in eff and eff["deleted"] in doc:
            problems.append(f"key {eff['deleted']} that the person deleted is back")
    elif kind.startswith("cold"):
        learned = [lr for lr in state.learnings if lr.text == eff["learning"]]
        if not learned:
            problems.append(f"learning {eff['learning']!r} (## {eff['category']}) missing from {COLD}")
        elif len(learned) > 1:
            problems.append(f"learning {eff['learning']!r} appears {len(learned)} times")
        elif learned[0].category != eff["category"]:
            problems.append(f"learning {eff['learning']!r} is under ## {learned[0].category}, not ## {eff['category']}")
    else:
        count = sum(1 for e in state.warm.get(eff["day"], []) if e.action == eff["entry"])
        if count != 1:
            problems.append(f"entry {eff['entry']!r} appears {count} times in warm/{eff['day']}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode", required=True)
    e = sub.add_parser("edit")
    e.add_argument("--root", required=True)
    e.add_argument("--ledger", required=True)
    e.add_argument("--seed", type=int, default=1)
    e.add_argument("--duration", type=float, required=True)
    e.add_argument("--gap-min", type=float, default=0.05)
    e.add_argument("--gap-max", type=float, default=0.3)
    p = sub.add_parser("progress")
    p.add_argument("--socket", required=True)
    p.add_argument("--workspace", required=True)
    p.add_argument("--client", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--rate", type=float, default=0.0)
    args = ap.parse_args()
    return person_main(args) if args.mode == "edit" else progress_main(args)


if __name__ == "__main__":
    sys.exit(main())
