"""What a burst of learnings costs the daemon in memory and CPU: `.venv/bin/python bench/learnings_rss.py [N]`.

A real daemon (snapshots and the watcher off, search on unless --no-search), one workspace, four clients each
sending `cold.learn` as fast as it is answered until N learnings (default 40,000) are in MEMORY.md, and a fifth
reading (`context.get {topic}` and `cold.get`, one pair every 10 ms; --no-reads: none). Prints the daemon's RSS
idle and at the end, its main heap and other anonymous memory (from /proc/<pid>/smaps), its CPU seconds and the
wall time: the soak's cold-tier load alone, ~35 s a run (torture/README.md, "What a learning costs in RSS").
glibc's MALLOC_* variables in the environment reach the daemon (and then memd leaves the allocator as they set
it: memd/malloc_tuning.py).
"""

from __future__ import annotations

import argparse
import threading
import time

import daemonctl

CLIENTS = 4
READ_PAUSE_SECONDS = 0.01


def heap_and_anonymous_mb(pid: int) -> tuple[float, float]:
    """RSS of the [heap] mapping and of the anonymous mappings (pymalloc's arenas, other malloc arenas, mmap'd
    blocks), in MB."""
    heap = anonymous = 0
    name = None
    with open(f"/proc/{pid}/smaps", encoding="ascii", errors="replace") as smaps:
        for line in smaps:
            fields = line.split()
            if fields and not fields[0].endswith(":"):  # a mapping's first line: its path (if any) is field 6
                name = fields[5] if len(fields) >= 6 else ""
            elif fields and fields[0] == "Rss:":
                if name == "[heap]":
                    heap += int(fields[1])
                elif name == "":
                    anonymous += int(fields[1])
    return heap / 1024, anonymous / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("learnings", type=int, nargs="?", default=40_000)
    parser.add_argument("--no-reads", action="store_true", help="no reader beside the learners")
    parser.add_argument("--no-search", action="store_true", help="[search] enabled = false")
    args = parser.parse_args()
    root = daemonctl.fresh_dir("learnings-rss")
    sections = {"search": {"enabled": False}} if args.no_search else {}
    daemon = daemonctl.Daemon(root / "d", daemonctl.base_config(root, {"w": root / "ws"}, **sections)).start()
    try:
        daemon.call("ping")
        idle = daemonctl.proc_rss_kib(daemon.pid) / 1024
        idle_heap, idle_anonymous = heap_and_anonymous_mb(daemon.pid)
        done = threading.Event()

        def learner(k: int) -> None:
            with daemon.client() as client:
                for i in range(k, args.learnings, CLIENTS):
                    client.call("cold.learn", workspace="w", category=f"C{k}", learning=f"c-{k}-{i} learned here")

        def reader() -> None:
            with daemon.client() as client:
                while not done.is_set():
                    client.call("context.get", workspace="w", topic="C1")
                    client.call("cold.get", workspace="w")
                    time.sleep(READ_PAUSE_SECONDS)

        threads = [threading.Thread(target=learner, args=(k,)) for k in range(CLIENTS)]
        if not args.no_reads:
            threads.append(threading.Thread(target=reader))
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads[:CLIENTS]:
            thread.join()
        elapsed = time.monotonic() - started
        done.set()
        for thread in threads[CLIENTS:]:
            thread.join()
        time.sleep(3)  # the fold after the last append
        end = daemonctl.proc_rss_kib(daemon.pid) / 1024
        heap, anonymous = heap_and_anonymous_mb(daemon.pid)
        cpu = daemonctl.proc_cpu_seconds(daemon.pid)
        print(
            f"{args.learnings:,} learnings in {elapsed:.1f} s, daemon CPU {cpu:.1f} s;"
            f" RSS {idle:.1f} -> {end:.1f} MB; main heap {idle_heap:.1f} -> {heap:.1f} MB,"
            f" other anonymous {idle_anonymous:.1f} -> {anonymous:.1f} MB"
        )
    finally:
        daemon.stop()
        daemonctl.empty_trash()


if __name__ == "__main__":
    main()
