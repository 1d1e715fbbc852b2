"""A load client process: writes uniquely labelled entries to every tier and records what was acknowledged.

    writer.py --socket S --workspace W --client K --out DIR [--window N] [--mix w=4,h=3,c=2,d=1]
              [--reads r=0] [--rate R] [--duration D] [--wait-go] [--seed N]

Labels: warm.log action "w-K-n", hot.note text "h-K-n", cold.learn category "CK" learning "c-K-n",
decision.record action "d-K-n" (reason "r-K-n"). Before a request is sent its label is appended to DIR/K.sent;
only after its success response arrived is "label<TAB>id" appended to DIR/K.ack (id: the note or decision id,
which a checkpoint record names when it compresses the entry); an error response goes to DIR/K.err as
"label<TAB>code<TAB>message". Each line is one os.write on an O_APPEND file, so a reader sees whole lines.
Up to --window requests are pipelined (responses come in request order; a mismatch is recorded in .err as ORDER).
The process ends when the daemon closes the connection (kill -9), after --duration seconds, or on a timeout, and
then writes DIR/K.lat: JSON with the latency of every answered request (seconds), when each was sent
(CLOCK_MONOTONIC seconds, comparable between processes on one machine) and counters.
Stdlib only, so that it starts in a few milliseconds.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import socket
import sys
import time

READS = {
    "hot.get": {},
    "warm.recent": {"days": 1},
    "context.get": {"topic": "C1"},
    "cold.get": {"topic": "c"},
    "status": None,
}


def parse_mix(text: str) -> list[tuple[str, int]]:
    out = []
    for part in text.split(","):
        if part:
            kind, _, weight = part.partition("=")
            out.append((kind, int(weight)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--window", type=int, default=1)
    ap.add_argument("--mix", default="w=4,h=3,c=2,d=1")
    ap.add_argument("--reads", type=int, default=0, help="weight of read requests in the mix")
    ap.add_argument("--rate", type=float, default=0.0, help="requests per second (0: as fast as answered)")
    ap.add_argument("--duration", type=float, default=0.0)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--wait-go", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    if args.wait_go and not sys.stdin.readline().strip():
        return 0
    client = args.client
    rng = random.Random(f"{args.seed}:{client}")
    mix = parse_mix(args.mix) + ([("r", args.reads)] if args.reads else [])
    kinds = [k for k, _ in mix]
    weights = [w for _, w in mix]
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    sent_fd = os.open(os.path.join(args.out, f"{client}.sent"), flags, 0o644)
    ack_fd = os.open(os.path.join(args.out, f"{client}.ack"), flags, 0o644)
    err_fd = os.open(os.path.join(args.out, f"{client}.err"), flags, 0o644)
    latencies: list[float] = []
    sent: list[float] = []  # when each answered request was sent, in the order of `latencies`
    methods: list[str] = []  # ...and its method
    counters = collections.Counter()

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + 10
    while True:
        try:
            sock.connect(args.socket)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline:
                counters["connect_failed"] += 1
                return finish(args, client, latencies, sent, counters, methods)
            time.sleep(0.01)
    sock.settimeout(args.timeout)
    buffer = b""
    inflight: collections.deque[tuple[int, str, str, str, float]] = collections.deque()
    n = 0
    start = time.monotonic()
    next_at = start
    stop_at = start + args.duration if args.duration else float("inf")
    ws = args.workspace

    def build(kind: str, n: int) -> tuple[str, str, dict[str, object]]:
        if kind == "w":
            label = f"w-{client}-{n}"
            return label, "warm.log", {"workspace": ws, "action": label, "details": {"n": n}, "result": "ok"}
        if kind == "h":
            label = f"h-{client}-{n}"
            return label, "hot.note", {"workspace": ws, "text": label}
        if kind == "c":
            label = f"c-{client}-{n}"
            return label, "cold.learn", {"workspace": ws, "category": f"C{client}", "learning": label}
        if kind == "d":
            label = f"d-{client}-{n}"
            return label, "decision.record", {"workspace": ws, "action": label, "reason": f"r-{client}-{n}"}
        method = rng.choice(sorted(READS))
        params = READS[method]
        return f"r-{client}-{n}", method, ({"workspace": ws, **params} if params is not None else {})

    try:
        while True:
            now = time.monotonic()
            while len(inflight) < args.window and now < stop_at:
                if args.rate and now < next_at:
                    if inflight:
                        break  # read what is owed while waiting for the next slot
                    time.sleep(next_at - now)
                    now = time.monotonic()
                    if now >= stop_at:
                        break
                n += 1
                kind = rng.choices(kinds, weights)[0]
                label, method, params = build(kind, n)
                if kind != "r":
                    os.write(sent_fd, f"{label}\n".encode())
                line = json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}) + "\n"
                sock.sendall(line.encode())
                inflight.append((n, label, kind, method, time.monotonic()))
                next_at = max(next_at + (1.0 / args.rate if args.rate else 0.0), now - 1.0)
                now = time.monotonic()
            if not inflight:
                if now >= stop_at:
                    break
                continue
            while b"\n" not in buffer:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    raise ConnectionError("closed")
                buffer += chunk
            raw, _, buffer = buffer.partition(b"\n")
            rid, label, kind, method, sent_at = inflight.popleft()
            latencies.append(time.monotonic() - sent_at)
            sent.append(sent_at)
            methods.append(method)
            response = json.loads(raw)
            if response.get("id") != rid:
                os.write(err_fd, f"{label}\tORDER\tresponse id {response.get('id')!r} for request {rid}\n".encode())
                counters["order"] += 1
            if "result" in response:
                counters["ok"] += 1
                if kind != "r":
                    result = response["result"] or {}
                    ident = (result.get("note") or result.get("decision") or {}).get("id", "-")
                    os.write(ack_fd, f"{label}\t{ident}\n".encode())
            else:
                err = response.get("error") or {}
                counters["error"] += 1
                message = str(err.get("message", "")).replace("\n", " ")[:300]
                os.write(err_fd, f"{label}\t{err.get('code')}\t{message}\n".encode())
    except (ConnectionError, OSError, ValueError):
        counters["disconnected"] += 1
    finally:
        counters["unanswered"] += len(inflight)
        sock.close()
    return finish(args, client, latencies, sent, counters, methods)


def finish(
    args: argparse.Namespace,
    client: str,
    latencies: list[float],
    sent: list[float],
    counters: collections.Counter[str],
    methods: list[str],
) -> int:
    with open(os.path.join(args.out, f"{client}.lat"), "w", encoding="utf-8") as f:
        json.dump({"latencies": latencies, "sent": sent, "counters": dict(counters), "methods": methods}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
