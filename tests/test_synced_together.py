"""Many files made durable in one wait for the disk (issue 39: a 100-trial sweep submit was ~500 fsyncs in a row):
history/store.py StateStore.synced_together and config/jobs_dir.py write_all_atomically. What must be on disk before
a trainer can run (a document with an attempt: its launch token) or what was there before is still synced at once."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from isaacd.config.jobs_dir import write_all_atomically
from isaacd.history.store import Attempt, JobHistory, StateStore


def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths fsync(2) was called on, in order (from any thread)."""
    seen: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


def synced_doc(seen: list[str], doc: Path) -> bool:
    """`doc` synced: its hidden temporary file before the rename (atomic_write_json), or the document itself."""
    return any(p == str(doc) or p.startswith(f"{doc.parent}/.{doc.name}.") for p in seen)


def test_new_jobs_documents_and_events_are_synced_together_at_the_end(tmp_path, monkeypatch):
    store = StateStore(tmp_path)
    seen = fsynced(monkeypatch)
    with store.synced_together(["a", "b"]):
        for job in ("a", "b"):
            store.save(JobHistory(name=job))
            store.append_event(job, "stopped", reason="autostart = false")
            store.save(JobHistory(name=job, last_iteration=0))  # a second save of a document this batch made
        assert seen == []  # written, readable, not waited for
        assert store.load("a").last_iteration == 0 and store.events("b")[-1]["event"] == "stopped"
    assert sorted(seen) == sorted({str(store.doc_path(j)) for j in "ab"} | {str(store.journal_path(j)) for j in "ab"}
                                  | {str(store.jobs_dir)})
    assert str(store.jobs_dir) == seen[-1]  # the directory after its files: the renames are durable last


def test_what_a_crash_must_find_is_synced_at_once_even_inside(tmp_path, monkeypatch):
    store = StateStore(tmp_path)
    store.save(JobHistory(name="old"))
    seen = fsynced(monkeypatch)
    with store.synced_together(["old", "launched", "elsewhere"]):
        store.save(JobHistory(name="old", last_iteration=5))  # it had a document: replaced only once synced
        assert synced_doc(seen, store.doc_path("old"))
        store.save(JobHistory(name="launched", attempts=[Attempt(1, 0.0, "initial", token="t")]))  # a token to find
        assert synced_doc(seen, store.doc_path("launched"))
        store.append_event("other", "started")  # a job the batch does not name
        assert str(store.journal_path("other")) in seen
        before = len(seen)
        done = threading.Event()
        threading.Thread(target=lambda: (store.save(JobHistory(name="elsewhere")), done.set())).start()
        assert done.wait(10) and synced_doc(seen[before:], store.doc_path("elsewhere"))  # another thread's: at once


def test_write_all_atomically_places_every_file_or_none(tmp_path, monkeypatch):
    d = tmp_path / "jobs.d"
    files = [(d / f"t{i}.toml", f"[[jobs]]\nname = \"t{i}\"\n") for i in range(5)]
    seen = fsynced(monkeypatch)
    write_all_atomically(files)
    assert sorted(p.name for p in d.iterdir()) == [f"t{i}.toml" for i in range(5)]
    assert all((d / f"t{i}.toml").stat().st_mode & 0o777 == 0o600 for i in range(5))
    assert len(seen) == 5  # each synced (before its rename)
    (tmp_path / "not-a-dir").write_text("")
    bad = [(d / "u0.toml", "x"), (tmp_path / "not-a-dir" / "u1.toml", "y")]
    with pytest.raises(OSError):
        write_all_atomically(bad)
    assert sorted(p.name for p in d.iterdir()) == [f"t{i}.toml" for i in range(5)]  # no u0, no hidden file left
