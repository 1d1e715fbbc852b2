"""Specification of durable file I/O (memd.fsio): atomic, fsynced, never through a symlink, failures surface."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from memd import fsio


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
        fsio.FileWrite(a, b"replaced\n", append=False),
        fsio.FileWrite(a, b"appended\n", append=True),
        fsio.FileWrite(b, b"{}\n", append=False),
        fsio.FileWrite(a, b"again\n", append=True),
    ]

    fps = fsio.apply_writes(writes)

    assert a.read_bytes() == b"replaced\nappended\nagain\n"
    assert b.read_bytes() == b"{}\n"
    assert len(fps) == 4
    assert fps[3] == fsio.fingerprint(a)
    assert fps[2] == fsio.fingerprint(b)
    assert [fp.size for fp in fps] == [9, 18, 3, 24]


def test_apply_writes_stops_at_the_first_failure_and_keeps_earlier_writes(tmp_path: Path) -> None:
    first, last = tmp_path / "first.md", tmp_path / "last.md"
    writes = [
        fsio.FileWrite(first, b"durable\n", append=True),
        fsio.FileWrite(tmp_path / "no-such-dir" / "x.md", b"fails\n", append=True),
        fsio.FileWrite(last, b"never\n", append=False),
    ]

    with pytest.raises(FileNotFoundError):
        fsio.apply_writes(writes)

    assert first.read_bytes() == b"durable\n"
    assert not last.exists()
