"""Specification of durable file I/O (memd.fsio): atomic, fsynced, never through a symlink, failures surface."""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memd import fsio, fsio_batch


def temp_names(directory: Path) -> list[str]:
    return [name for name in os.listdir(directory) if fsio.is_temp_name(name)]


def failing_fsync(fd: int) -> None:
    raise OSError(errno.EIO, "Input/output error")


# --- atomic_replace ------------------------------------------------------------------------------------------


def test_atomic_replace_creates_the_file_with_exact_content_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "context.json"
    data = b'{"task": "d\xc3\xa9j\xc3\xa0 vu"}\n' + bytes(range(256))

    fp = fsio.atomic_replace(target, data)

    assert target.read_bytes() == data
    assert temp_names(tmp_path) == []
    assert fp == fsio.fingerprint(target)


def test_atomic_replace_over_an_existing_file_keeps_only_the_new_content(tmp_path: Path) -> None:
    target = tmp_path / "context.json"
    target.write_bytes(b"old content that is much longer than the new one\n" * 100)

    fsio.atomic_replace(target, b"new\n")

    assert target.read_bytes() == b"new\n"
    assert temp_names(tmp_path) == []


def test_atomic_replace_with_empty_data_leaves_an_empty_file(tmp_path: Path) -> None:
    target = tmp_path / "MEMORY.md"
    target.write_bytes(b"something")

    fsio.atomic_replace(target, b"")

    assert target.read_bytes() == b""


# --- durable_append ------------------------------------------------------------------------------------------


def test_durable_append_creates_a_missing_file(tmp_path: Path) -> None:
    log = tmp_path / "2024-03-15.md"

    fp = fsio.durable_append(log, b"first\n")

    assert log.read_bytes() == b"first\n"
    assert fp == fsio.fingerprint(log)


def test_durable_append_adds_to_the_end_and_keeps_what_was_there(tmp_path: Path) -> None:
    log = tmp_path / "2024-03-15.md"
    log.write_bytes(b"written by hand\n")

    fsio.durable_append(log, b"one\n")
    fp = fsio.durable_append(log, b"two\n")

    assert log.read_bytes() == b"written by hand\none\ntwo\n"
    assert fp.size == len(b"written by hand\none\ntwo\n")


# --- symlinks ------------------------------------------------------------------------------------------------


def test_writes_refuse_a_symlinked_directory(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real, target_is_directory=True)

    with pytest.raises(OSError) as replace_error:
        fsio.atomic_replace(link / "context.json", b"{}")
    with pytest.raises(OSError) as append_error:
        fsio.durable_append(link / "log.md", b"x\n")

    assert replace_error.value.errno == errno.ELOOP
    assert append_error.value.errno == errno.ELOOP
    assert os.listdir(real) == []


def test_ensure_dir_refuses_a_symlink_in_place_of_the_directory(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "warm").symlink_to(real, target_is_directory=True)

    with pytest.raises(OSError) as error:
        fsio.ensure_dir(tmp_path / "warm")

    assert error.value.errno == errno.ELOOP


def test_ensure_dir_creates_missing_parents(tmp_path: Path) -> None:
    fsio.ensure_dir(tmp_path / "a" / "b" / "c")

    assert (tmp_path / "a" / "b" / "c").is_dir()


def test_durable_append_does_not_follow_a_symlink_at_the_file_path(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_bytes(b"precious\n")
    link = tmp_path / "log.md"
    link.symlink_to(target)

    with pytest.raises(OSError) as error:
        fsio.durable_append(link, b"appended\n")

    assert error.value.errno == errno.ELOOP
    assert target.read_bytes() == b"precious\n"


def test_atomic_replace_replaces_a_symlink_itself_and_leaves_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    target.write_bytes(b"precious\n")
    link = tmp_path / "context.json"
    link.symlink_to(target)

    fsio.atomic_replace(link, b"{}\n")

    assert target.read_bytes() == b"precious\n"
    assert not link.is_symlink()
    assert link.read_bytes() == b"{}\n"


def test_read_bytes_does_not_follow_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "secret"
    target.write_bytes(b"secret\n")
    link = tmp_path / "context.json"
    link.symlink_to(target)

    with pytest.raises(OSError) as error:
        fsio.read_bytes(link)

    assert error.value.errno == errno.ELOOP


def test_read_bytes_of_a_missing_file_is_none(tmp_path: Path) -> None:
    assert fsio.read_bytes(tmp_path / "missing") is None


def test_read_range_returns_the_bytes_after_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "log.md"
    path.write_bytes(b"old part|new part")

    assert fsio.read_range(path, len(b"old part|")) == b"new part"


# --- fingerprints --------------------------------------------------------------------------------------------


def test_fingerprint_of_a_missing_file_is_none(tmp_path: Path) -> None:
    assert fsio.fingerprint(tmp_path / "missing") is None


def test_fingerprint_changes_when_someone_appends(tmp_path: Path) -> None:
    path = tmp_path / "log.md"
    before = fsio.durable_append(path, b"ours\n")

    with open(path, "ab") as f:
        f.write(b"theirs\n")

    assert fsio.fingerprint(path) != before


def test_fingerprint_changes_when_someone_replaces_the_file_with_the_same_size(tmp_path: Path) -> None:
    path = tmp_path / "context.json"
    before = fsio.atomic_replace(path, b'{"a": 1}\n')
    other = tmp_path / "editor-save"
    other.write_bytes(b'{"a": 2}\n')

    os.replace(other, path)  # what editors and git checkout do: a new inode

    assert fsio.fingerprint(path) != before


def test_fingerprint_changes_when_someone_rewrites_in_place_with_another_mtime(tmp_path: Path) -> None:
    path = tmp_path / "context.json"
    before = fsio.atomic_replace(path, b'{"a": 1}\n')
    path.write_bytes(b'{"a": 2}\n')
    os.utime(path, ns=(before.mtime_ns + 1_000_000_000, before.mtime_ns + 1_000_000_000))

    after = fsio.fingerprint(path)

    assert after is not None
    assert after.ino == before.ino and after.size == before.size
    assert after != before


def test_fingerprint_describes_a_symlink_itself(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"x" * 100)
    link = tmp_path / "link"
    link.symlink_to(target)

    fp = fsio.fingerprint(link)

    assert fp is not None
    assert fp.ino == os.lstat(link).st_ino != os.stat(target).st_ino


# --- startup recovery ----------------------------------------------------------------------------------------


def test_remove_stale_temp_files_removes_only_memd_temp_names(tmp_path: Path) -> None:
    hot, warm = tmp_path / "hot", tmp_path / "warm"
    hot.mkdir()
    warm.mkdir()
    stale = [hot / ".context.json.memd-tmp-123-abcd1234", warm / ".2024-03-15.md.memd-tmp-9-00ff00ff"]
    kept = [
        hot / "context.json",
        hot / ".context.json.swp",
        hot / "context.json.tmp",
        warm / "2024-03-15.md",
        warm / "memd-tmp-notes.md",
    ]
    for path in stale + kept:
        path.write_bytes(b"x")

    removed = fsio.remove_stale_temp_files([hot, warm, tmp_path / "missing"])

    assert sorted(removed) == sorted(stale)
    assert all(not p.exists() for p in stale)
    assert all(p.exists() for p in kept)


def test_remove_stale_temp_files_with_nothing_to_remove_returns_nothing(tmp_path: Path) -> None:
    (tmp_path / "context.json").write_bytes(b"{}")

    assert fsio.remove_stale_temp_files([tmp_path]) == []


# --- failures propagate --------------------------------------------------------------------------------------


def test_an_fsync_failure_in_atomic_replace_propagates_and_leaves_the_original(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "context.json"
    target.write_bytes(b'{"old": true}\n')
    monkeypatch.setattr(os, "fsync", failing_fsync)

    with pytest.raises(OSError) as error:
        fsio.atomic_replace(target, b'{"new": true}\n')

    assert error.value.errno == errno.EIO
    assert target.read_bytes() == b'{"old": true}\n'
    assert temp_names(tmp_path) == []


def test_an_fsync_failure_in_durable_append_propagates_and_cuts_the_file_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "2024-03-15.md"
    log.write_bytes(b"acknowledged before\n")
    monkeypatch.setattr(os, "fsync", failing_fsync)

    with pytest.raises(OSError) as error:
        fsio.durable_append(log, b"never acknowledged\n")

    assert error.value.errno == errno.EIO
    assert log.read_bytes() == b"acknowledged before\n"


def test_an_fsync_failure_is_not_retried_into_success(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def fail_once(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fail_once)

    with pytest.raises(OSError):
        fsio.durable_append(tmp_path / "log.md", b"x\n")

    assert len(calls) == 1


# --- batches -------------------------------------------------------------------------------------------------


def test_apply_writes_applies_in_order_and_returns_fingerprints_in_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a.md", tmp_path / "b.json"
    writes = [
        fsio_batch.FileWrite(a, b"replaced\n", append=False),
        fsio_batch.FileWrite(a, b"appended\n", append=True),
        fsio_batch.FileWrite(b, b"{}\n", append=False),
        fsio_batch.FileWrite(a, b"again\n", append=True),
    ]

    fps = fsio_batch.apply_writes(writes)

    assert a.read_bytes() == b"replaced\nappended\nagain\n"
    assert b.read_bytes() == b"{}\n"
    assert len(fps) == 4
    assert fps[3] == fsio.fingerprint(a)
    assert fps[2] == fsio.fingerprint(b)
    assert [fp.size for fp in fps] == [9, 18, 3, 24]


def test_apply_writes_stops_at_the_first_failed_append_keeping_earlier_appends_and_unguarded_replaces(
    tmp_path: Path,
) -> None:
    # Replaces are published before the appends; a failed append puts back only guarded replaces (test_publish.py):
    # of what an unguarded one displaced nothing is known, so it stays.
    first, last = tmp_path / "first.md", tmp_path / "last.md"
    writes = [
        fsio_batch.FileWrite(first, b"durable\n", append=True),
        fsio_batch.FileWrite(tmp_path / "no-such-dir" / "x.md", b"fails\n", append=True),
        fsio_batch.FileWrite(last, b"never\n", append=False),
    ]

    with pytest.raises(FileNotFoundError):
        fsio_batch.apply_writes(writes)

    assert first.read_bytes() == b"durable\n"
    assert last.read_bytes() == b"never\n"
    assert temp_names(tmp_path) == []


# --- what is made durable, in what order ---------------------------------------------------------------------------


class Journal:
    """Stands in for fsio's `os` and its renames: performs each call for real and logs what it changes.

    Names are durable only once their directory is fsynced (a killed process cannot show this: the page cache
    survives it; a power cut does not). The log is what torture/powerloss.py replays, reduced to the rule."""

    def __init__(self, renames: fsio.Renames) -> None:
        self.ops: list[tuple[str, Path]] = []
        self._paths: dict[int, Path] = {}
        self._renames = renames
        self.supported = renames.supported

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def open(self, path: os.PathLike[str] | str, flags: int, mode: int = 0o777) -> int:
        existed = os.path.lexists(path)
        fd = os.open(path, flags, mode)
        self._paths[fd] = Path(path)
        if flags & os.O_CREAT and not existed:
            self.ops.append(("create", Path(path)))
        return fd

    def close(self, fd: int) -> None:
        os.close(fd)
        self._paths.pop(fd, None)

    def write(self, fd: int, data: bytes) -> int:
        self.ops.append(("write", self._paths[fd]))
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)
        self.ops.append(("fsync", self._paths[fd]))

    def replace(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)
        self.ops.append(("rename", Path(dst)))

    def unlink(self, path: Path) -> None:
        os.unlink(path)
        self.ops.append(("unlink", Path(path)))

    def mkdir(self, path: Path, mode: int = 0o777) -> None:
        os.mkdir(path, mode)
        self.ops.append(("mkdir", Path(path)))

    # Renames' interface (fsio.RENAMES)
    def exchange(self, src: Path, dst: Path) -> None:
        self._renames.exchange(src, dst)
        self.ops.append(("rename", Path(dst)))

    def noreplace(self, src: Path, dst: Path) -> None:
        self._renames.noreplace(src, dst)
        self.ops.append(("rename", Path(dst)))

    def unsupported(self, exc: OSError, path: Path) -> bool:
        return self._renames.unsupported(exc, path)

    def available_for(self, path: Path) -> bool:
        return self.supported and self._renames.available_for(path)

    def undurable(self) -> list[str]:
        """Each change that no later fsync makes durable: a name (created, renamed to, made or removed) whose
        directory is not fsynced after it, a write whose file is not. memd's own temp names need no directory
        fsync (startup removes them); what a rename puts in place does."""
        problems = []
        for i, (kind, path) in enumerate(self.ops):
            if kind == "fsync" or (kind == "create" and fsio.is_temp_name(path.name)):
                continue
            if kind == "unlink" and fsio.is_temp_name(path.name):
                continue
            needs = path if kind == "write" else path.parent
            if ("fsync", needs) not in self.ops[i + 1 :]:
                problems.append(f"{kind} {path}: no fsync of {needs} after it")
        return problems


@pytest.fixture
def journal(monkeypatch: pytest.MonkeyPatch) -> Journal:
    recorder = Journal(fsio.RENAMES)
    monkeypatch.setattr(fsio, "os", recorder)
    monkeypatch.setattr(fsio_batch, "os", recorder)
    monkeypatch.setattr(fsio, "RENAMES", recorder)
    return recorder


def test_a_replace_fsyncs_the_directory_after_the_rename_whether_the_file_was_new_or_not(
    tmp_path: Path, journal: Journal
) -> None:
    fsio.atomic_replace(tmp_path / "new.json", b"{}\n")
    (tmp_path / "old.json").write_bytes(b"old\n")
    fsio.atomic_replace(tmp_path / "old.json", b"new\n")

    assert [op for op in journal.ops if op[0] == "rename"] == [
        ("rename", tmp_path / "new.json"),
        ("rename", tmp_path / "old.json"),
    ]
    assert journal.undurable() == []


def test_an_append_that_creates_its_file_fsyncs_the_directory(tmp_path: Path, journal: Journal) -> None:
    fsio.durable_append(tmp_path / "2024-03-15.md", b"### 10:00:00 - first\n")
    fsio.durable_append(tmp_path / "2024-03-15.md", b"### 10:00:01 - second\n")

    assert ("create", tmp_path / "2024-03-15.md") in journal.ops
    assert journal.undurable() == []


def test_ensure_dir_fsyncs_the_parent_of_each_directory_it_makes(tmp_path: Path, journal: Journal) -> None:
    fsio.ensure_dir(tmp_path / "ws" / "warm" / "archive")

    assert [op for op in journal.ops if op[0] == "mkdir"] == [
        ("mkdir", tmp_path / "ws"),
        ("mkdir", tmp_path / "ws" / "warm"),
        ("mkdir", tmp_path / "ws" / "warm" / "archive"),
    ]
    assert journal.undurable() == []


def test_a_batch_fsyncs_every_directory_it_renamed_or_created_in(tmp_path: Path, journal: Journal) -> None:
    hot, cold, warm = tmp_path / "hot", tmp_path / "cold", tmp_path / "warm"
    for d in (hot, cold, warm):
        d.mkdir()
    (cold / "MEMORY.md").write_bytes(b"# Agent Memory\n")
    writes = [
        fsio_batch.FileWrite(warm / "2024-03-15.md", b"# day\n", append=True),
        fsio_batch.FileWrite(
            cold / "MEMORY.md", b"# Agent Memory\n\n## x\n", append=False, guarded=True, expected=b"# Agent Memory\n"
        ),
        fsio_batch.FileWrite(hot / "context.json", b"{}\n", append=False, guarded=True, expected=None),
    ]

    fsio_batch.apply_writes(writes)

    renamed = {path for kind, path in journal.ops if kind == "rename"}
    assert renamed == {cold / "MEMORY.md", hot / "context.json"}
    assert ("create", warm / "2024-03-15.md") in journal.ops
    assert journal.undurable() == []


def test_a_batch_on_a_filesystem_without_renameat2_flags_still_fsyncs_after_its_renames(
    tmp_path: Path, journal: Journal
) -> None:
    journal.supported = False  # the fallback: compare, then a plain rename
    (tmp_path / "MEMORY.md").write_bytes(b"old\n")
    writes = [
        fsio_batch.FileWrite(tmp_path / "MEMORY.md", b"new\n", append=False, guarded=True, expected=b"old\n"),
        fsio_batch.FileWrite(tmp_path / "context.json", b"{}\n", append=False),
    ]

    fsio_batch.apply_writes(writes)

    assert {path for kind, path in journal.ops if kind == "rename"} == {
        tmp_path / "MEMORY.md",
        tmp_path / "context.json",
    }
    assert journal.undurable() == []


def test_removing_stale_temp_files_fsyncs_their_directory(tmp_path: Path, journal: Journal) -> None:
    stale = tmp_path / f".context.json{fsio.TEMP_MARKER}123-abcd"
    stale.write_bytes(b"half")

    assert fsio.remove_stale_temp_files([tmp_path]) == [stale]

    removed = [i for i, op in enumerate(journal.ops) if op == ("unlink", stale)]
    assert removed and ("fsync", tmp_path) in journal.ops[removed[0] + 1 :]


# --- what every open asks for: no symlink followed, no FIFO waited on, no descriptor leaked to children ----------


class Opens(Journal):
    """The Journal, also logging the flags of every open (by path) and cutting every write short."""

    def __init__(self, renames: fsio.Renames, max_write: int = 1 << 30) -> None:
        super().__init__(renames)
        self.flags: list[tuple[Path, int]] = []
        self.max_write = max_write

    def open(self, path: os.PathLike[str] | str, flags: int, mode: int = 0o777) -> int:
        self.flags.append((Path(path), flags))
        return super().open(path, flags, mode)

    def write(self, fd: int, data: bytes) -> int:
        return super().write(fd, bytes(data[: self.max_write]))


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> Opens:
    recorder = Opens(fsio.RENAMES, max_write=7)  # a short write at every call: what os.write may do
    monkeypatch.setattr(fsio, "os", recorder)
    monkeypatch.setattr(fsio_batch, "os", recorder)
    monkeypatch.setattr(fsio, "RENAMES", recorder)
    return recorder


def test_every_open_refuses_symlinks_and_is_closed_on_exec_reads_never_wait_on_a_fifo(
    tmp_path: Path, opens: Opens
) -> None:
    (tmp_path / "old.md").write_bytes(b"line\n")
    fsio.atomic_replace(tmp_path / "a.json", b"{}\n")
    fsio.durable_append(tmp_path / "new.md", b"x\n")
    fsio.durable_append(tmp_path / "old.md", b"y\n")
    fsio_batch.apply_writes([fsio_batch.FileWrite(tmp_path / "b.json", b"{}\n", append=False)])
    fsio.read_bytes(tmp_path / "old.md")
    fsio.read_range(tmp_path / "old.md", 2)
    fsio.last_byte(tmp_path / "old.md", 3)

    files = [(p, f) for p, f in opens.flags if not f & os.O_DIRECTORY]
    directories = [(p, f) for p, f in opens.flags if f & os.O_DIRECTORY]
    assert len(files) == 8 and len(directories) >= 3
    for path, flags in opens.flags:
        assert flags & os.O_CLOEXEC, f"{path} opened without O_CLOEXEC"
    for path, flags in files:
        assert flags & os.O_NOFOLLOW, f"{path} opened without O_NOFOLLOW"
        if flags & os.O_ACCMODE == os.O_RDONLY or flags & os.O_APPEND:
            assert flags & os.O_NONBLOCK, f"{path} opened without O_NONBLOCK: a FIFO there would hang memd"
    for path, flags in directories:
        assert flags & os.O_ACCMODE == os.O_RDONLY and path.is_dir()


def test_short_writes_are_continued_until_every_byte_is_written(tmp_path: Path, opens: Opens) -> None:
    data = bytes(range(256)) * 3

    fsio.atomic_replace(tmp_path / "a.json", data)
    fsio.durable_append(tmp_path / "log.md", data)
    fsio_batch.apply_writes([fsio_batch.FileWrite(tmp_path / "b.json", data, append=False)])

    assert [(tmp_path / n).read_bytes() for n in ("a.json", "log.md", "b.json")] == [data] * 3


def test_an_append_to_an_existing_file_fsyncs_only_the_file(tmp_path: Path, journal: Journal) -> None:
    (tmp_path / "log.md").write_bytes(b"x\n")

    fsio.durable_append(tmp_path / "log.md", b"y\n")

    assert [op for op in journal.ops if op[0] == "fsync"] == [("fsync", tmp_path / "log.md")]


# --- modes ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_files_are_created_0644_and_directories_0755_or_as_asked(tmp_path: Path, umask_022: None) -> None:
    fsio.atomic_replace(tmp_path / "a.json", b"{}\n")
    fsio.durable_append(tmp_path / "log.md", b"x\n")
    fsio_batch.apply_writes([fsio_batch.FileWrite(tmp_path / "b.json", b"{}\n", append=False)])
    fsio.ensure_dir(tmp_path / "d" / "e")
    fsio.ensure_dir(tmp_path / "p" / "q", mode=0o700)

    assert [mode_of(tmp_path / n) for n in ("a.json", "log.md", "b.json")] == [0o644] * 3
    assert [mode_of(tmp_path / n) for n in ("d", "d/e", "p", "p/q")] == [0o755, 0o755, 0o700, 0o700]


# --- refusals say what and where ----------------------------------------------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("reader", ["read_bytes", "read_range", "last_byte"])
def test_reading_anything_but_a_regular_file_is_einval_naming_it_and_leaks_no_descriptor(
    tmp_path: Path, reader: str
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    before = open_fds()

    with pytest.raises(OSError) as caught:
        getattr(fsio, reader)(fifo, *(() if reader == "read_bytes" else (1,)))

    assert caught.value.errno == errno.EINVAL
    assert str(caught.value) == f"[Errno 22] {fifo} is not a regular file; memd only reads and writes regular files"
    assert open_fds() == before


@pytest.mark.parametrize("reader", ["read_bytes", "read_range", "last_byte"])
def test_reading_through_a_symlink_is_refused(tmp_path: Path, reader: str) -> None:
    (tmp_path / "real").write_bytes(b"secret\n")
    (tmp_path / "link").symlink_to(tmp_path / "real")

    with pytest.raises(OSError) as caught:
        getattr(fsio, reader)(tmp_path / "link", *(() if reader == "read_bytes" else (1,)))

    assert caught.value.errno == errno.ELOOP


def test_appending_to_a_fifo_is_einval_naming_it_and_never_blocks(tmp_path: Path) -> None:
    fifo = tmp_path / "2024-03-15.md"
    os.mkfifo(fifo)

    with pytest.raises(OSError) as caught:
        fsio.durable_append(fifo, b"x\n")

    assert caught.value.errno == errno.EINVAL
    assert str(caught.value) == f"[Errno 22] {fifo} is not a regular file; memd only writes regular files"


def test_writing_through_a_symlinked_directory_is_eloop_naming_it(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "hot").symlink_to(tmp_path / "real")

    with pytest.raises(OSError) as caught:
        fsio.atomic_replace(tmp_path / "hot" / "context.json", b"{}\n")

    assert caught.value.errno == errno.ELOOP
    assert str(caught.value) == f"[Errno 40] refusing to write through symlinked directory {tmp_path / 'hot'}"


def test_a_pinned_directory_reports_what_happened_to_it_with_errno_and_path(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "file").write_bytes(b"")
    (tmp_path / "link").symlink_to(ws)
    pinned = fsio.PinnedDir.pin(ws)

    def failure(action: Any) -> OSError:
        with pytest.raises(OSError) as caught:
            action()
        return caught.value

    link = failure(lambda: fsio.PinnedDir.pin(tmp_path / "link"))
    not_dir = failure(lambda: fsio.PinnedDir.pin(tmp_path / "file"))
    ws.rename(tmp_path / "moved")
    gone = failure(pinned.verify)
    (tmp_path / "ws").symlink_to(tmp_path / "moved")
    swapped = failure(pinned.verify)
    (tmp_path / "ws").unlink()
    (tmp_path / "ws").mkdir()
    replaced = failure(pinned.verify)

    assert (link.errno, link.filename) == (errno.ELOOP, str(tmp_path / "link"))
    assert link.strerror == f"{tmp_path / 'link'} is a symlink; configure the directory it points to"
    assert (not_dir.errno, not_dir.filename, not_dir.strerror) == (
        errno.ENOTDIR,
        str(tmp_path / "file"),
        f"{tmp_path / 'file'} is not a directory",
    )
    assert (gone.errno, gone.filename, gone.strerror) == (errno.ENOENT, str(ws), f"workspace directory {ws} is gone")
    assert (swapped.errno, swapped.filename) == (errno.ELOOP, str(ws))
    assert swapped.strerror.endswith("(put the directory back, or point the config at the new one and reload)")
    assert (replaced.errno, replaced.filename) == (errno.ESTALE, str(ws))
    assert replaced.strerror.endswith("place); put it back, or restart memd to adopt the new one")


def test_outside_change_says_which_file_and_why(tmp_path: Path) -> None:
    path = tmp_path / "context.json"

    assert str(fsio_batch.OutsideChange(path)) == f"{path} changed outside memd while a batch was being published"
    assert fsio_batch.OutsideChange(path).path == path
    busy = fsio_batch.OutsideChange(path, busy=True)
    assert str(busy) == f"{path} is held open for writing by another process while a batch was being published"
    assert busy.busy is True


# --- renameat2 -----------------------------------------------------------------------------------------------------


def test_renameat2_swaps_refuses_to_replace_and_reports_both_names(tmp_path: Path) -> None:
    renames = fsio.Renames()
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    a.write_bytes(b"A")
    b.write_bytes(b"B")

    assert renames.supported is True
    renames.exchange(a, b)
    renames.noreplace(a, c)
    failures: list[BaseException] = []

    def refused() -> None:  # in a fresh thread: ctypes keeps errno per thread, so it starts at 0 there
        try:
            renames.noreplace(b, c)
        except BaseException as exc:
            failures.append(exc)

    worker = threading.Thread(target=refused)
    worker.start()
    worker.join()
    with pytest.raises(FileExistsError) as caught:
        raise failures[0]

    assert (c.read_bytes(), b.read_bytes(), a.exists()) == (b"B", b"A", False)
    assert (caught.value.errno, caught.value.strerror) == (errno.EEXIST, os.strerror(errno.EEXIST))
    assert (caught.value.filename, caught.value.filename2) == (str(b), str(c))


@pytest.mark.parametrize(
    ("code", "unsupported", "anywhere"),
    [
        (errno.ENOSYS, True, False),  # no renameat2 in this kernel: off everywhere
        (errno.EINVAL, True, True),  # this filesystem refuses the flags: off for it only
        (errno.EOPNOTSUPP, True, True),
        (errno.EEXIST, False, True),  # an answer, not a refusal
        (errno.EIO, False, True),
    ],
)
def test_only_a_refused_flag_turns_renameat2_off_and_only_where_it_was_refused(
    tmp_path: Path, code: int, unsupported: bool, anywhere: bool
) -> None:
    renames = fsio.Renames()
    here = tmp_path / "context.json"

    assert renames.unsupported(OSError(code, os.strerror(code)), here) is unsupported
    assert renames.available_for(here) is (not unsupported)
    assert renames.supported is anywhere
    assert renames.available_for(Path("/proc/self/status")) is anywhere  # another filesystem


class FailingRenames:
    """fsio.RENAMES failing every call with `code` (a filesystem without the flags, or a disk error)."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.refused = False
        self._real = fsio.Renames()

    def exchange(self, src: Path, dst: Path) -> None:
        raise OSError(self.code, os.strerror(self.code), str(src))

    noreplace = exchange

    def available_for(self, path: Path) -> bool:
        return not self.refused

    def unsupported(self, exc: OSError, path: Path) -> bool:
        self.refused = self._real.unsupported(exc, path)
        return self.refused


def test_a_filesystem_without_the_flags_falls_back_to_compare_then_rename(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renames = FailingRenames(errno.EINVAL)
    monkeypatch.setattr(fsio, "RENAMES", renames)
    (tmp_path / "MEMORY.md").write_bytes(b"old\n")

    fsio_batch.apply_writes(
        [fsio_batch.FileWrite(tmp_path / "MEMORY.md", b"new\n", append=False, guarded=True, expected=b"old\n")]
    )

    assert (tmp_path / "MEMORY.md").read_bytes() == b"new\n"
    assert renames.available_for(tmp_path / "MEMORY.md") is False


def test_any_other_renameat2_failure_fails_the_batch_and_leaves_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fsio, "RENAMES", FailingRenames(errno.EIO))
    (tmp_path / "MEMORY.md").write_bytes(b"old\n")

    with pytest.raises(OSError) as caught:
        fsio_batch.apply_writes(
            [fsio_batch.FileWrite(tmp_path / "MEMORY.md", b"new\n", append=False, guarded=True, expected=b"old\n")]
        )

    assert caught.value.errno == errno.EIO
    assert (tmp_path / "MEMORY.md").read_bytes() == b"old\n"
    assert temp_names(tmp_path) == []


def test_an_unguarded_replace_goes_over_an_existing_file(tmp_path: Path) -> None:
    (tmp_path / "context.json").write_bytes(b"old\n")

    fsio_batch.apply_writes([fsio_batch.FileWrite(tmp_path / "context.json", b"new\n", append=False)])

    assert (tmp_path / "context.json").read_bytes() == b"new\n"


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_a_guarded_replace_over_what_became_a_symlink_or_fifo_is_an_outside_change(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "context.json"
    if kind == "symlink":
        (tmp_path / "elsewhere").write_bytes(b"old\n")
        path.symlink_to(tmp_path / "elsewhere")
    else:
        os.mkfifo(path)

    with pytest.raises(fsio_batch.OutsideChange) as caught:
        fsio_batch.apply_writes([fsio_batch.FileWrite(path, b"new\n", append=False, guarded=True, expected=b"old\n")])

    assert (caught.value.path, caught.value.busy) == (path, False)
    assert os.path.islink(path) if kind == "symlink" else stat.S_ISFIFO(os.lstat(path).st_mode)
    assert temp_names(tmp_path) == []


# --- appends after someone else's -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("on_disk", "planned_size", "data", "after"),
    [
        (b"mine\ntheirs", 5, b"next\n", b"mine\ntheirs\nnext\n"),  # grown, last line open: a newline first
        (b"mine\ntheirs\n", 5, b"next\n", b"mine\ntheirs\nnext\n"),  # grown, last line closed: as it is
        (b"mine\ntheirs", 5, b"\nnext\n", b"mine\ntheirs\nnext\n"),  # data starting a line itself: no second one
        (b"mine\ntheirs", None, b"next\n", b"mine\ntheirsnext\n"),  # no plan to compare with: appended as asked
        (b"mine", 4, b"next\n", b"minenext\n"),  # nobody else wrote: appended as asked
        (b"x", 0, b"next\n", b"x\nnext\n"),  # one byte, someone else's
        (b"", 5, b"next\n", b"next\n"),  # emptied by someone: nothing to separate from
    ],
    ids=["open-line", "closed-line", "data-newline", "no-plan", "unchanged", "one-byte", "emptied"],
)
def test_an_append_starts_a_new_line_only_after_someone_elses_open_one(
    tmp_path: Path, on_disk: bytes, planned_size: int | None, data: bytes, after: bytes
) -> None:
    log = tmp_path / "2024-03-15.md"
    log.write_bytes(on_disk)

    fp = fsio.durable_append(log, data, expected_size=planned_size)

    assert log.read_bytes() == after
    assert fp.size == len(after)


def test_last_byte_reads_exactly_the_byte_before_the_given_size(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"ab\ncd")

    assert [fsio.last_byte(path, n) for n in (1, 2, 3, 5)] == [b"a", b"b", b"\n", b"d"]
    assert fsio.last_byte(path, 0) == b"a"


# --- cleanup never hides the failure ----------------------------------------------------------------------------


def test_a_failed_replace_reports_the_write_error_even_when_its_temp_file_is_already_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fsync_then_lose_the_temp(fd: int) -> None:
        for name in temp_names(tmp_path):
            os.unlink(tmp_path / name)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync_then_lose_the_temp)

    with pytest.raises(OSError) as replace:
        fsio.atomic_replace(tmp_path / "a.json", b"{}\n")
    with pytest.raises(OSError) as batch:
        fsio_batch.apply_writes([fsio_batch.FileWrite(tmp_path / "b.json", b"{}\n", append=False)])

    assert replace.value.errno == batch.value.errno == errno.EIO


def test_a_failed_append_reports_the_write_error_even_when_cutting_back_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_truncate(fd: int, size: int) -> None:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    monkeypatch.setattr(os, "ftruncate", no_truncate)

    with pytest.raises(OSError) as caught:
        fsio.durable_append(tmp_path / "log.md", b"x\n")

    assert caught.value.errno == errno.EIO


def test_ensure_dir_accepts_a_directory_made_by_someone_else_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_mkdir = os.mkdir

    def raced(path: Path, mode: int = 0o777) -> None:
        real_mkdir(path, mode)  # another process got there first
        real_mkdir(path, mode)

    monkeypatch.setattr(os, "mkdir", raced)

    fsio.ensure_dir(tmp_path / "warm")

    assert (tmp_path / "warm").is_dir()


def test_stale_temp_files_are_removed_from_every_directory_even_after_a_missing_one(tmp_path: Path) -> None:
    (tmp_path / "cold").mkdir()
    stale = tmp_path / "cold" / f".MEMORY.md{fsio.TEMP_MARKER}1-ab"
    stale.write_bytes(b"")

    assert fsio.remove_stale_temp_files([tmp_path / "hot", tmp_path / "cold"]) == [stale]
    assert not stale.exists()


def test_a_stale_temp_file_that_vanishes_before_its_removal_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / f".a{fsio.TEMP_MARKER}1-ab").write_bytes(b"")
    real_unlink = os.unlink

    def twice(path: Path) -> None:
        real_unlink(path)
        real_unlink(path)  # removed by someone else first

    monkeypatch.setattr(os, "unlink", twice)

    assert fsio.remove_stale_temp_files([tmp_path]) == []


def test_appending_to_a_fifo_that_has_a_reader_is_einval_naming_it(tmp_path: Path) -> None:
    fifo = tmp_path / "2024-03-15.md"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(OSError) as caught:
            fsio.durable_append(fifo, b"x\n")
    finally:
        os.close(reader)

    assert caught.value.errno == errno.EINVAL
    assert str(caught.value) == f"[Errno 22] {fifo} is not a regular file; memd only reads and writes regular files"


@pytest.mark.parametrize("renameat2", [True, False], ids=["renameat2", "compare-then-rename"])
def test_a_file_created_by_someone_else_after_planning_names_itself_in_the_outside_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, renameat2: bool
) -> None:
    if not renameat2:
        monkeypatch.setattr(fsio, "RENAMES", FailingRenames(errno.EINVAL))
    path = tmp_path / "context.json"
    path.write_bytes(b"theirs\n")

    with pytest.raises(fsio_batch.OutsideChange) as caught:
        fsio_batch.apply_writes([fsio_batch.FileWrite(path, b"ours\n", append=False, guarded=True, expected=None)])

    assert (caught.value.path, caught.value.busy) == (path, False)
    assert path.read_bytes() == b"theirs\n"


def test_compare_then_rename_over_what_became_a_symlink_is_an_outside_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fsio, "RENAMES", FailingRenames(errno.EINVAL))
    (tmp_path / "elsewhere").write_bytes(b"old\n")
    (tmp_path / "MEMORY.md").symlink_to(tmp_path / "elsewhere")

    with pytest.raises(fsio_batch.OutsideChange):
        fsio_batch.apply_writes(
            [fsio_batch.FileWrite(tmp_path / "MEMORY.md", b"new\n", append=False, guarded=True, expected=b"old\n")]
        )

    assert (tmp_path / "MEMORY.md").is_symlink()


class FailingAppend:
    """fsio's `os`, failing the open of `fail` after running `meanwhile` (what someone did just then)."""

    def __init__(self, fail: Path, meanwhile: Any) -> None:
        self.fail = fail
        self.meanwhile = meanwhile

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def open(self, path: Any, flags: int, mode: int = 0o777) -> int:
        if Path(path) == self.fail:
            self.meanwhile()
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return os.open(path, flags, mode)


def test_a_failed_append_removes_a_file_its_batch_created(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hot, log = tmp_path / "context.json", tmp_path / "log.md"
    monkeypatch.setattr(fsio, "os", FailingAppend(log, lambda: None))
    monkeypatch.setattr(fsio_batch, "os", FailingAppend(log, lambda: None))

    with pytest.raises(OSError) as caught:
        fsio_batch.apply_writes(
            [
                fsio_batch.FileWrite(hot, b"{}\n", append=False, guarded=True, expected=None),
                fsio_batch.FileWrite(log, b"x\n", True),
            ]
        )

    assert caught.value.errno == errno.ENOSPC
    assert not hot.exists()
    assert temp_names(tmp_path) == []


@pytest.mark.parametrize("what", ["replaced", "deleted"])
def test_a_failed_append_leaves_a_file_someone_replaced_or_deleted_meanwhile_as_they_left_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    hot, log = tmp_path / "context.json", tmp_path / "log.md"
    hot.write_bytes(b"old\n")

    def someone() -> None:
        if what == "deleted":
            hot.unlink()
        else:
            (tmp_path / "saved").write_bytes(b"the person's save\n")
            os.replace(tmp_path / "saved", hot)

    monkeypatch.setattr(fsio, "os", FailingAppend(log, someone))

    monkeypatch.setattr(fsio_batch, "os", FailingAppend(log, someone))

    with pytest.raises(OSError) as caught:
        fsio_batch.apply_writes(
            [
                fsio_batch.FileWrite(hot, b"new\n", append=False, guarded=True, expected=b"old\n"),
                fsio_batch.FileWrite(log, b"x\n", True),
            ]
        )

    assert caught.value.errno == errno.ENOSPC
    assert (hot.read_bytes() if hot.exists() else None) == (b"the person's save\n" if what == "replaced" else None)
    assert temp_names(tmp_path) == []


def test_a_refusal_on_another_filesystem_keeps_renameat2_in_use_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    renames = fsio.Renames()
    renames.refused_on.add(os.lstat("/proc").st_dev)  # say, an NFS mount refused the flags once
    monkeypatch.setattr(fsio, "RENAMES", renames)
    (tmp_path / "MEMORY.md").write_bytes(b"old\n")

    fsio_batch.apply_writes(
        [fsio_batch.FileWrite(tmp_path / "MEMORY.md", b"new\n", append=False, guarded=True, expected=b"old\n")]
    )

    assert (tmp_path / "MEMORY.md").read_bytes() == b"new\n"
    assert renames.available_for(tmp_path / "MEMORY.md") is True
    assert renames.available_for(Path("/proc/self/status")) is False


# --- what the mutation run of issue 19 found unpinned ----------------------------------------------------------


def test_a_temp_name_is_hidden_marked_as_memds_and_ends_in_eight_random_hex_digits(tmp_path: Path) -> None:
    name = fsio.temp_name(tmp_path / "context.json").name
    prefix = f".context.json{fsio.TEMP_MARKER}{fsio._INSTANCE}-"

    assert name.startswith(prefix) and fsio.is_temp_name(name)
    suffix = name[len(prefix) :]
    assert len(suffix) == 8 and int(suffix, 16) >= 0  # 32 random bits: short names under a long path
    assert fsio.temp_name(tmp_path / "context.json") != fsio.temp_name(tmp_path / "context.json")


def test_without_renameat2_in_the_c_library_the_flags_are_never_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    class OldLibc:  # a libc from before renameat2 (glibc < 2.28): the symbol is missing
        pass

    monkeypatch.setattr(fsio.ctypes, "CDLL", lambda *_a, **_k: OldLibc())
    renames = fsio.Renames()

    assert renames.supported is False
    assert renames.available_for(Path("/")) is False


def test_a_refused_flag_on_a_directory_that_vanished_still_means_fall_back(tmp_path: Path) -> None:
    renames = fsio.Renames()
    gone = tmp_path / "gone" / "context.json"  # its directory was removed: the device cannot be looked up

    assert renames.unsupported(OSError(errno.EINVAL, "Invalid argument"), gone) is True
    assert renames.refused_on == set() and renames.supported is True


def test_a_failed_append_reports_its_own_error_even_when_putting_a_replace_back_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hot = tmp_path / "context.json"
    hot.write_bytes(b"old\n")

    def no_space(path: Path, data: bytes, expected_size: int | None = None) -> fsio.Fingerprint:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    def cannot_put_back(st: Any) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(fsio, "durable_append", no_space)
    monkeypatch.setattr(fsio_batch, "_unpublish", cannot_put_back)
    writes = [
        fsio_batch.FileWrite(hot, b"new\n", append=False, guarded=True, expected=b"old\n"),
        fsio_batch.FileWrite(tmp_path / "day.md", b"entry\n", append=True),
    ]

    with pytest.raises(OSError) as caught:
        fsio_batch.apply_writes(writes)

    assert caught.value.errno == errno.ENOSPC  # the cause, not the clean-up's trouble


class RacingRenames(fsio.Renames):
    """renameat2 that finds someone else's file (or none) at the target, as a save between the check and the
    rename would."""

    def __init__(self, error: type[OSError]) -> None:
        super().__init__()
        self.error = error

    def _call(self, src: Path, dst: Path, flags: int) -> None:
        raise self.error(errno.EEXIST if self.error is FileExistsError else errno.ENOENT, "raced", str(dst))


@pytest.mark.parametrize("error", [FileExistsError, FileNotFoundError])
def test_a_file_created_or_deleted_between_the_check_and_the_rename_is_an_outside_change_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: type[OSError]
) -> None:
    monkeypatch.setattr(fsio, "RENAMES", RacingRenames(error))
    path = tmp_path / "context.json"
    expected = None if error is FileExistsError else b"old\n"
    if expected is not None:
        path.write_bytes(expected)

    with pytest.raises(fsio_batch.OutsideChange) as caught:
        fsio_batch.apply_writes([fsio_batch.FileWrite(path, b"ours\n", append=False, guarded=True, expected=expected)])

    assert (caught.value.path, caught.value.busy) == (path, False)
    assert temp_names(tmp_path) == []


def test_a_publish_withdrawn_for_a_writer_holding_the_file_names_the_file(tmp_path: Path) -> None:
    target = tmp_path / "MEMORY.md"
    target.write_bytes(b"planned-from")
    fd = os.open(target, os.O_WRONLY | os.O_APPEND)
    try:
        with pytest.raises(fsio_batch.OutsideChange) as caught:
            fsio_batch.apply_writes(
                [fsio_batch.FileWrite(target, b"memd's", append=False, guarded=True, expected=b"planned-from")]
            )
    finally:
        os.close(fd)

    assert (caught.value.path, caught.value.busy) == (target, True)


def test_a_file_turned_into_a_directory_after_planning_is_an_outside_change_and_stays(tmp_path: Path) -> None:
    target = tmp_path / "context.json"
    target.mkdir()  # someone replaced the file with a directory; RENAME_EXCHANGE swaps a file with one too
    (target / "inside").write_bytes(b"theirs")

    with pytest.raises(fsio_batch.OutsideChange):
        fsio_batch.apply_writes(
            [fsio_batch.FileWrite(target, b"ours\n", append=False, guarded=True, expected=b"old\n")]
        )

    assert target.is_dir() and (target / "inside").read_bytes() == b"theirs"
    assert temp_names(tmp_path) == []


class Holders:
    """Stands in for `_held_open_for_writing`: the file is held for the first `held` checks, then let go."""

    def __init__(self, held: int) -> None:
        self.held = held
        self.checks = 0

    def __call__(self, path: Path) -> bool:
        self.checks += 1
        return self.checks <= self.held


@pytest.mark.parametrize("held", [0, 3])
def test_putting_a_replace_back_waits_for_a_writer_only_while_it_holds_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: int
) -> None:
    target = tmp_path / "MEMORY.md"
    target.write_bytes(b"old")
    write = fsio_batch.FileWrite(target, b"memd's", append=False, guarded=True, expected=b"old")
    staged = fsio_batch._stage(write)
    fsio.RENAMES.exchange(staged.tmp, target)
    staged.published, staged.holds_displaced = True, True
    sleeps: list[float] = []
    monkeypatch.setattr(fsio_batch, "_held_open_for_writing", Holders(held))
    monkeypatch.setattr(fsio_batch.time, "sleep", sleeps.append)

    fsio_batch._unpublish(staged)

    assert sleeps == [0.001] * held  # 1 ms at a time, and not at all when nobody holds it
    assert target.read_bytes() == b"old"


def test_putting_back_an_empty_replace_of_a_file_that_vanished_meanwhile_adds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "context.json"
    target.write_bytes(b"old")
    write = fsio_batch.FileWrite(target, b"", append=False, guarded=True, expected=b"old")
    staged = fsio_batch._stage(write)
    fsio.RENAMES.exchange(staged.tmp, target)
    staged.published, staged.holds_displaced = True, True
    monkeypatch.setattr(fsio_batch, "_current_bytes", lambda path: None)  # gone between the lstat and the read

    fsio_batch._unpublish(staged)

    assert target.read_bytes() == b"old"


def test_the_lease_probe_opens_without_following_or_blocking_and_keeps_no_descriptor(
    tmp_path: Path, opens: Opens
) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"x")

    assert fsio_batch._held_open_for_writing(path) is False

    [(opened, flags)] = opens.flags
    assert opened == path
    assert flags & os.O_ACCMODE == os.O_RDONLY
    assert flags & os.O_NOFOLLOW and flags & os.O_NONBLOCK and flags & os.O_CLOEXEC


def test_the_lease_probe_of_a_missing_file_a_symlink_or_a_fifo_is_false_at_once(tmp_path: Path) -> None:
    held = tmp_path / "held.md"
    held.write_bytes(b"x")
    link = tmp_path / "link.md"
    link.symlink_to(held)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fd = os.open(held, os.O_WRONLY | os.O_APPEND)  # the symlink's target is held open for writing
    try:
        assert fsio_batch._held_open_for_writing(held) is True
        assert fsio_batch._held_open_for_writing(link) is False  # never followed
        assert fsio_batch._held_open_for_writing(tmp_path / "missing") is False
        assert fsio_batch._held_open_for_writing(fifo) is False  # a FIFO without a writer: opened without blocking
    finally:
        os.close(fd)


def test_the_lease_probe_redirects_a_lease_break_to_sigurg_and_lets_go_of_the_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "MEMORY.md"
    path.write_bytes(b"x")
    calls: list[tuple[int, ...]] = []
    real = fsio_batch.fcntl.fcntl

    def recording(fd: int, cmd: int, *arg: int) -> Any:
        calls.append((cmd, *arg))
        return real(fd, cmd, *arg)

    monkeypatch.setattr(fsio_batch.fcntl, "fcntl", recording)

    assert fsio_batch._held_open_for_writing(path) is False
    # SIGIO's default action would kill the daemon if a writer broke the lease before it is dropped.
    assert calls == [
        (fsio_batch._F_SETSIG, signal.SIGURG),
        (fcntl.F_SETLEASE, fcntl.F_RDLCK),
        (fcntl.F_SETLEASE, fcntl.F_UNLCK),
    ]


def test_a_displaced_file_that_cannot_be_read_back_withdraws_the_publish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "MEMORY.md"
    target.write_bytes(b"old")
    real = fsio_batch._current_bytes

    def unreadable_once_displaced(path: Path) -> bytes | None:
        if fsio.is_temp_name(path.name):  # the displaced file, under memd's temp name after the exchange
            raise OSError(errno.EIO, "Input/output error", str(path))
        return real(path)

    monkeypatch.setattr(fsio_batch, "_current_bytes", unreadable_once_displaced)

    with pytest.raises(fsio_batch.OutsideChange):  # not known to be what was planned from: never kept on a guess
        fsio_batch.apply_writes([fsio_batch.FileWrite(target, b"memd's", append=False, guarded=True, expected=b"old")])

    assert target.read_bytes() == b"old"


@pytest.mark.parametrize(
    "rel", ["warm/../x", "warm/../../outside", "../outside", "/etc/x", "warm/./x", "warm//x", ".."]
)
def test_restore_tree_refuses_a_path_that_is_not_plainly_inside_the_workspace(tmp_path: Path, rel: str) -> None:
    root = tmp_path / "ws"
    (root / "warm").mkdir(parents=True)

    with pytest.raises(OSError) as refused:
        fsio_batch.restore_tree(fsio.PinnedDir.pin(root), {rel: b"evil\n", "warm/2024-01-01.md": b"fine\n"}, ["warm"])

    assert refused.value.errno == errno.EINVAL
    assert refused.value.strerror == f"memd does not restore {rel!r}: not a plain path inside the workspace"
    assert refused.value.filename == rel
    assert not (root / "x").exists() and not (tmp_path / "outside").exists()
    assert not (root / "warm" / "2024-01-01.md").exists()  # refused before anything is written


@pytest.mark.parametrize("rel", [".", "..", "", "../ws-sibling", "/tmp"])
def test_restore_tree_refuses_to_empty_anything_but_a_plain_path_inside_the_workspace(tmp_path: Path, rel: str) -> None:
    root = tmp_path / "ws"
    (root / "warm").mkdir(parents=True)
    (root / "warm" / "2024-01-01.md").write_bytes(b"kept\n")
    (tmp_path / "ws-sibling").mkdir()
    (tmp_path / "ws-sibling" / "notes.md").write_bytes(b"someone else's\n")
    (tmp_path / "beside.md").write_bytes(b"beside the workspace\n")

    with pytest.raises(OSError) as refused:  # `paths` are emptied of what the snapshot lacks: here, everything
        fsio_batch.restore_tree(fsio.PinnedDir.pin(root), {}, [rel])

    assert (refused.value.errno, refused.value.filename) == (errno.EINVAL, rel)
    assert (root / "warm" / "2024-01-01.md").read_bytes() == b"kept\n"
    assert (tmp_path / "ws-sibling" / "notes.md").exists() and (tmp_path / "beside.md").exists()


# --- the worker side of a batch and of a restore -----------------------------------------------------------------


def restore_root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for tier in ("hot", "warm", "cold"):
        (root / tier).mkdir(parents=True)
    (root / "hot" / "context.json").write_bytes(b'{"task": "now"}\n')
    (root / "warm" / "2024-01-01.md").write_bytes(b"# kept as it is\n")
    (root / "warm" / "2024-01-02.md").write_bytes(b"# newer than the snapshot\n")
    (root / "cold" / "MEMORY.md").write_bytes(b"# Agent Memory\n- [2024-01-01] now\n")
    return root


def test_restore_tree_writes_what_differs_removes_what_the_snapshot_lacks_and_says_which(
    tmp_path: Path, journal: Journal
) -> None:
    root = restore_root(tmp_path)
    (root / "warm" / "archive").mkdir()
    (root / "warm" / "archive" / "2023-12.tar.gz").write_bytes(b"an archive the snapshot lacks")
    snapshot = {
        "hot/context.json": b'{"task": "then"}\n',
        "warm/2024-01-01.md": b"# kept as it is\n",
        "cold/MEMORY.md": b"# Agent Memory\n",
        "cold/PROPOSED.md": b"# Proposed\n",  # missing now: created
    }

    changed = fsio_batch.restore_tree(fsio.PinnedDir.pin(root), snapshot, ["hot", "warm", "cold"])

    assert changed == [
        "cold/MEMORY.md",
        "cold/PROPOSED.md",
        "hot/context.json",
        "warm/2024-01-02.md",
        "warm/archive/2023-12.tar.gz",
    ]  # replaced in path order, then removed tier by tier; the identical day file is not touched
    assert {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()} == snapshot
    assert ("rename", root / "warm" / "2024-01-01.md") not in journal.ops
    assert journal.undurable() == []  # every replace and every removal is made durable by a directory fsync


def test_restore_tree_removes_only_under_the_paths_it_is_given_and_never_memd_temp_files(tmp_path: Path) -> None:
    root = restore_root(tmp_path)
    temp = fsio.temp_name(root / "warm" / "2024-01-03.md")
    temp.write_bytes(b"a batch's staged file")

    changed = fsio_batch.restore_tree(fsio.PinnedDir.pin(root), {"warm/2024-01-01.md": b"# kept as it is\n"}, ["warm"])

    assert changed == ["warm/2024-01-02.md"]
    assert temp.exists()
    assert (root / "hot" / "context.json").exists() and (root / "cold" / "MEMORY.md").exists()  # not in `paths`


def test_restore_tree_of_a_single_file_path_removes_that_file_only(tmp_path: Path) -> None:
    root = restore_root(tmp_path)

    changed = fsio_batch.restore_tree(fsio.PinnedDir.pin(root), {}, ["hot/context.json"])

    assert changed == ["hot/context.json"]
    assert not (root / "hot" / "context.json").exists()
    assert (root / "warm" / "2024-01-02.md").exists()


def test_restore_tree_leaves_a_symlink_inside_a_tier_alone(tmp_path: Path) -> None:
    root = restore_root(tmp_path)
    outside = tmp_path / "outside.md"
    outside.write_bytes(b"not memd's")
    (root / "warm" / "link.md").symlink_to(outside)

    changed = fsio_batch.restore_tree(fsio.PinnedDir.pin(root), {}, ["warm"])

    assert changed == ["warm/2024-01-01.md", "warm/2024-01-02.md"]
    assert (root / "warm" / "link.md").is_symlink() and outside.read_bytes() == b"not memd's"


@pytest.mark.parametrize("how", ["written", "removed"])
def test_restore_tree_refuses_a_symlinked_tier_before_touching_anything(tmp_path: Path, how: str) -> None:
    root = restore_root(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "2024-01-05.md").write_bytes(b"someone else's")
    (root / "warm" / "2024-01-01.md").unlink()
    (root / "warm" / "2024-01-02.md").unlink()
    (root / "warm").rmdir()
    (root / "warm").symlink_to(elsewhere)
    files = {"hot/context.json": b"{}\n"} | ({"warm/2024-01-05.md": b"memd's"} if how == "written" else {})

    with pytest.raises(OSError) as refused:
        fsio_batch.restore_tree(fsio.PinnedDir.pin(root), files, ["warm"])

    assert refused.value.errno == errno.ELOOP
    assert refused.value.strerror == f"{root / 'warm'} is a symlink; memd does not restore through it"
    assert (elsewhere / "2024-01-05.md").read_bytes() == b"someone else's"
    assert (root / "hot" / "context.json").read_bytes() == b'{"task": "now"}\n'  # refused before any write


def test_restore_tree_into_a_workspace_directory_swapped_since_it_was_pinned_writes_nothing(tmp_path: Path) -> None:
    root = restore_root(tmp_path)
    pinned = fsio.PinnedDir.pin(root)
    root.rename(tmp_path / "moved")
    root.mkdir()

    with pytest.raises(OSError):
        fsio_batch.restore_tree(pinned, {"hot/context.json": b"{}\n"}, ["hot"])

    assert list(root.iterdir()) == []


def test_write_batch_makes_a_removed_tier_directory_again_but_never_the_workspace(tmp_path: Path) -> None:
    root = restore_root(tmp_path)
    pinned = fsio.PinnedDir.pin(root)
    (root / "warm" / "2024-01-01.md").unlink()
    (root / "warm" / "2024-01-02.md").unlink()
    (root / "warm").rmdir()  # `rm -r warm` by a person

    fsio_batch.write_batch(pinned, [fsio_batch.FileWrite(root / "warm" / "2024-01-03.md", b"# day\n", append=True)])

    assert (root / "warm" / "2024-01-03.md").read_bytes() == b"# day\n"
    gone = tmp_path / "gone"
    gone.mkdir()
    pinned_gone = fsio.PinnedDir.pin(gone)
    gone.rmdir()
    with pytest.raises(OSError):
        fsio_batch.write_batch(
            pinned_gone, [fsio_batch.FileWrite(gone / "warm" / "2024-01-03.md", b"# day\n", append=True)]
        )
    assert not gone.exists()


def test_restore_tree_refuses_a_symlinked_tier_it_only_writes_into(tmp_path: Path) -> None:
    root = restore_root(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "cold" / "MEMORY.md").unlink()
    (root / "cold").rmdir()
    (root / "cold").symlink_to(elsewhere)

    with pytest.raises(OSError) as refused:  # cold/ is written to, not emptied: it is not among `paths`
        fsio_batch.restore_tree(
            fsio.PinnedDir.pin(root), {"cold/MEMORY.md": b"# M\n", "hot/context.json": b"{}\n"}, ["hot"]
        )

    assert refused.value.errno == errno.ELOOP
    assert refused.value.strerror == f"{root / 'cold'} is a symlink; memd does not restore through it"
    assert list(elsewhere.iterdir()) == []
    assert (root / "hot" / "context.json").read_bytes() == b'{"task": "now"}\n'
