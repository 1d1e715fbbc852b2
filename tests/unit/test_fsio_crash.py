"""Contract 1 under `kill -9`: an acknowledged write survives, no file is torn, recovery leaves no temp file.

A child process writes through memd.fsio in a loop, alternating a durable append of a numbered line to a log and
an atomic replace of a JSON document, and prints the number of each completed call to its stdout: a line read
from the pipe is an acknowledgement, exactly as memd acknowledges a write only after fsio returns. The parent
kills the child at a random moment, checks what is on disk against what was acknowledged, runs the startup
recovery (remove_stale_temp_files) and lets the next child loose on the same files. Children are started (and
have imported memd.fsio) while their predecessors run, and waits on its stdin for the go: interpreter start-up is
most of an iteration's cost.

MEMD_CRASH_ITERATIONS raises the number of kills (default 200).
"""

from __future__ import annotations

import collections
import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import memd
from memd import fsio

ITERATIONS = int(os.environ.get("MEMD_CRASH_ITERATIONS", "200"))
SEED = 20240315
NUMBERS_PER_CHILD = 1_000_000  # child k numbers its writes k * 1e6 + 1, + 2, ...: unique and increasing
FIRST_ACK_TIMEOUT = 20.0
MAX_RUN_SECONDS = 0.02
SPARES = 3  # children started ahead, each waiting for its go

# The child. Appended lines are "<n> <pad length> <pad>\n" so that a torn line can be told from a whole one;
# pads are sometimes large so that a SIGKILL can land inside a write. A log left without a final newline by
# the previous child gets one first, as the warm store does before appending.
CHILD = r"""
import json, random, sys
from pathlib import Path
from memd import fsio

go = sys.stdin.readline().split()  # started ahead of time; waits here until the previous child is dead
if not go:
    sys.exit(0)
directory, base, seed = Path(sys.argv[1]), int(go[0]), int(go[1])
log, state = directory / "log.txt", directory / "state.json"
rng = random.Random(seed)
data = fsio.read_bytes(log)
if data and not data.endswith(b"\n"):
    fsio.durable_append(log, b"\n")
out = sys.stdout
i = base
while True:
    i += 1
    pad = rng.randint(0, 300) if rng.random() < 0.8 else rng.randint(0, 60000)
    if (i - base) % 2:
        fsio.durable_append(log, b"%d %d %s\n" % (i, pad, b"y" * pad))
        out.write("a %d\n" % i)
    else:
        fsio.atomic_replace(state, json.dumps({"n": i, "pad": "x" * pad}).encode())
        out.write("r %d\n" % i)
    out.flush()
"""


@dataclass
class Ledger:
    appends: list[int] = field(default_factory=list)  # acknowledged append numbers, in order
    last_replace: int = 0
    replaces: int = 0
    kills: int = 0
    checked: int = 0  # the log up to here was verified (whole lines only)
    numbers: list[int] = field(default_factory=list)  # numbers of the whole lines up to `checked`
    torn_offsets: set[int] = field(default_factory=set)  # where a torn, unacknowledged line starts


def parse_lines(data: bytes, start: int, torn_offsets: set[int]) -> tuple[list[int], int]:
    """Numbers of the whole lines of `data[start:]` in order, and the offset where they end (a trailing partial
    line is not included). A malformed whole line is allowed only where an earlier check saw a torn tail."""
    numbers: list[int] = []
    offset = start
    lines = data[start:].split(b"\n")
    lines.pop()  # the trailing partial line, or b"" when the log ends with a newline
    for line in lines:
        line_start, offset = offset, offset + len(line) + 1
        parts = line.split(b" ", 2)
        whole = (
            len(parts) == 3
            and parts[0].isdigit()
            and parts[1].isdigit()
            and len(parts[2]) == int(parts[1])
            and parts[2].count(b"y") == len(parts[2])
        )
        if whole:
            numbers.append(int(parts[0]))
        else:
            assert line_start in torn_offsets, f"torn or invalid line at offset {line_start}: {line[:60]!r}"
    return numbers, offset


def read_acks(child: subprocess.Popen[bytes], rng: random.Random) -> bytes:
    """Everything the child printed: wait for its first acknowledgement, read for a random short time, kill,
    then drain what it had already written to the pipe (those calls completed too)."""
    assert child.stdout is not None
    fd = child.stdout.fileno()
    os.set_blocking(fd, False)
    received = bytearray()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        deadline = time.monotonic() + FIRST_ACK_TIMEOUT
        run_until: float | None = None
        while True:
            now = time.monotonic()
            if run_until is None and b"\n" in received:
                run_until = now + rng.uniform(0, MAX_RUN_SECONDS)
            limit = run_until if run_until is not None else deadline
            if now >= limit:
                break
            if selector.select(limit - now):
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                received += chunk
    child.send_signal(signal.SIGKILL)
    child.wait()
    os.set_blocking(fd, True)
    received += child.stdout.read()
    child.stdout.close()
    assert run_until is not None, f"the child acknowledged nothing within {FIRST_ACK_TIMEOUT}s"
    return bytes(received)


def check_after_kill(directory: Path, ledger: Ledger, acks: bytes, base: int) -> None:
    lines = acks.split(b"\n")
    lines.pop()  # an unterminated acknowledgement line is no acknowledgement
    acknowledged_now: list[int] = []
    for line in lines:
        kind, number = line.split(b" ")
        assert base < int(number) < base + NUMBERS_PER_CHILD
        if kind == b"a":
            acknowledged_now.append(int(number))
        else:
            ledger.last_replace = int(number)
            ledger.replaces += 1
    ledger.appends += acknowledged_now

    data = (directory / "log.txt").read_bytes()
    assert len(data) >= ledger.checked, "the log shrank"
    numbers, ledger.checked = parse_lines(data, ledger.checked, ledger.torn_offsets)
    if ledger.checked < len(data):
        ledger.torn_offsets.add(ledger.checked)  # the append in flight, cut by the kill
    ledger.numbers += numbers
    written_now = [n for n in numbers if base < n]
    assert written_now == sorted(set(written_now)), f"log numbers repeat or go back: {written_now}"
    assert all(n < base for n in numbers if n not in written_now)
    missing = sorted(set(acknowledged_now) - set(written_now))
    assert not missing, f"acknowledged appends lost after kill {ledger.kills}: {missing[:10]}"
    unacknowledged = [n for n in written_now if n not in set(acknowledged_now)]
    assert unacknowledged in ([], written_now[-1:]), (
        f"only the append in flight may be unacknowledged: {unacknowledged}"
    )

    fsio.remove_stale_temp_files([directory])  # what startup does
    assert [name for name in os.listdir(directory) if fsio.is_temp_name(name)] == []
    if ledger.last_replace or (directory / "state.json").exists():
        state = json.loads((directory / "state.json").read_bytes())
        assert state["n"] >= ledger.last_replace, f"acknowledged replace {ledger.last_replace} lost: {state['n']}"
        assert state["n"] < base + NUMBERS_PER_CHILD


def test_kill_9_loses_no_acknowledged_write_and_leaves_no_torn_file(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    directory = tmp_path / "ws"
    directory.mkdir()
    package_root = str(Path(memd.__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": package_root}
    ledger = Ledger()
    started = time.monotonic()

    def spawn() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-S", "-c", CHILD, str(directory)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )

    spares = collections.deque(spawn() for _ in range(SPARES))
    try:
        for k in range(1, ITERATIONS + 1):
            child = spares.popleft()
            spares.append(spawn())
            base = k * NUMBERS_PER_CHILD
            assert child.stdin is not None
            child.stdin.write(b"%d %d\n" % (base, rng.getrandbits(32)))
            child.stdin.close()
            acks = read_acks(child, rng)
            ledger.kills += 1
            check_after_kill(directory, ledger, acks, base)
    finally:
        for spare in spares:
            assert spare.stdin is not None and spare.stdout is not None
            spare.stdin.close()  # no go: it exits without writing
            spare.wait()
            spare.stdout.close()

    # A final check of the whole log from its first byte: every acknowledged number, once, in order.
    numbers, _ = parse_lines((directory / "log.txt").read_bytes(), 0, ledger.torn_offsets)
    assert numbers == ledger.numbers
    assert numbers == sorted(set(numbers))
    acknowledged = set(ledger.appends)
    assert [n for n in numbers if n in acknowledged] == ledger.appends
    summary = (
        f"crash test: {ledger.kills} kills, {len(ledger.appends) + ledger.replaces} acknowledged writes "
        f"({len(ledger.appends)} appends, {ledger.replaces} replaces), {len(ledger.torn_offsets)} torn "
        f"unacknowledged tails, lost=0, {time.monotonic() - started:.1f}s"
    )
    print(summary)
    assert ledger.appends and ledger.replaces, summary
