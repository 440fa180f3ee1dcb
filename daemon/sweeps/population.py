"""A PBT sweep's side of the tick (issue 40): its members' signals in, pbt.py's decision, the exploits carried out
through the members' job state machines. The sweep controller (controller.py) calls it for `kind = "pbt"`; it acts
on nothing itself but a member's job file, which it rewrites with the member's new hyperparameters.

An exploit, each step saved in the sweep's record before it is acted on, so a supervisor killed at any point goes
on where it was and neither loses a member nor exploits it twice:

  1. decided (`exploit.phase = "reload"`): the member's new values are its values now; its job file's extra_args
     are rewritten with them and a reload is asked for, so every later launch of the member (a crash's restart
     too) trains with them. A reload never touches a running trainer.
  2. once the member's config in force has them (`"resume"`): `ResumeFrom` with the source's checkpoint folders; the
     member saves at its next iteration boundary and goes again at once from a copy of the source's newest
     complete checkpoint (attempt/from_job.py), its new values set again after the load (launch/exploit.py), through
     its booted spare where one is ready. The source never stops.
  3. once the member's next attempt trains: done, written into its lineage (from whom, at which iteration, which
     values). A member that came back to rest instead (no copy could be made) starts again from its own checkpoint
     with its new values, and the lineage says the copy failed.

The members' states as pbt.py reads them: BOOTING from a (re)start until its objective has a value again (its
series is emptied at an exploit: the values before were another policy's), EXPLOITING while an exploit is under way.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config.jobs_dir import job_file, write_atomically
from ..daemon_log import log
from ..jobs.messages import Command, ResumeFrom, Start
from ..jobs.model import JobState, Origin
from ..status.signals import JobSignals
from .asha import TrialState
from .observe import Series, trial_state
from .pbt import Done, Exploit, Keep, MemberState, MemberView, Pbt, decide
from .record import SweepRecord, TrialRecord
from .spec import SweepSpec, trial_job
from .trial_file import toml_job_file, trial_header

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

Journal = Callable[..., Any]
LINEAGE_KEPT = 200  # a member's newest exploits kept in the sweep's record
RESENDS = 3  # a ResumeFrom not taken is asked again this often, then the exploit is given up


def member_state(t: TrialRecord, sig: JobSignals | None, scored: bool) -> MemberState | None:
    """pbt.py's view of a member (None: never launched)."""
    state = trial_state(t, sig.state if sig is not None else None)
    if state == TrialState.PENDING:
        return None
    if state == TrialState.CANCELLED and sig is not None and sig.state == JobState.STOPPED \
            and t.started_attempt is not None and sig.attempt <= t.started_attempt:
        return MemberState.BOOTING  # its launch's Start is not carried out yet (sent this pass, or again: controller)
    if state in (TrialState.COMPLETED, TrialState.FAILED, TrialState.CANCELLED):
        return {TrialState.COMPLETED: MemberState.COMPLETED, TrialState.FAILED: MemberState.FAILED,
                TrialState.CANCELLED: MemberState.CANCELLED}[state]
    if t.exploit is not None:
        return MemberState.EXPLOITING
    if sig is not None and sig.state == JobState.RUNNING and scored:
        return MemberState.TRAINING
    return MemberState.BOOTING


def _from_copy_of(path: str | None, source: str) -> bool:
    """Whether a checkpoint path is an exploit's copy of `source`'s (attempt/from_job.py's folder)."""
    return path is not None and Path(path).parent.name.rsplit("_pbt-from-", 1)[-1].startswith(f"{source}-at-")


def member_extra_args(spec: SweepSpec, t: TrialRecord) -> list[str]:
    """The member's job's extra_args with its values now (the base job's, then each searched override)."""
    return list(trial_job(spec, t.number, dict(t.values)).extra_args)


class Population:
    """Its acts beyond the returned commands (the journal's events, a member's job file) wait in `pending` until the
    controller has saved the record with the decision they follow from (`flush`): an event a person (or a test) has
    read, or a file rewritten, is never a decision a supervisor killed a moment later forgets."""

    def __init__(self, journal: Journal, request_reload: Callable[[], None]):
        self._journal = journal
        self.request_reload = request_reload
        self.pending: list[Callable[[], None]] = []

    def journal(self, job: str, event: str, **fields: Any) -> None:
        self.pending.append(lambda: self._journal(job, event, **fields))

    def flush(self) -> None:
        """After the record is saved: the events and files of the decisions it holds."""
        pending, self.pending = self.pending, []
        for act in pending:
            act()

    def tick(self, rec: SweepRecord, spec: SweepSpec, pbt: Pbt, series: dict[int, Series],
             iterations: dict[int, int | None],
             by_name: dict[str, JobSignals]) -> tuple[list[tuple[str, Command]], bool]:
        """This pass's commands, and whether the record changed (to be saved before they are acted on)."""
        out: list[tuple[str, Command]] = []
        changed = False
        for t in rec.trials:  # the exploits under way first: each goes one step further when it can
            if t.exploit is not None:
                step, moved = self._exploit_step(rec, spec, t, by_name, series)
                out += step
                changed |= moved
        views = []
        for t in rec.trials:
            sig = by_name.get(t.job)
            value = series.setdefault(t.number, Series()).value(spec.objective.smooth)
            state = member_state(t, sig, value is not None)
            if state is None:
                continue
            views.append(MemberView(number=t.number, state=state, config=dict(t.values),
                                    iteration=iterations.get(t.number) or 0, objective=value, judged_at=t.judged_at,
                                    checkpoint=sig.checkpoint_iteration if sig is not None else None,
                                    exploits=t.exploits))
        for d in decide(pbt, views) if views else []:
            out += self._carry_out(rec, spec, d, by_name)
            changed = True
        return out, changed

    # ---- the decisions ------------------------------------------------------------------------------------------
    def _carry_out(self, rec: SweepRecord, spec: SweepSpec, d: Done | Keep | Exploit,
                   by_name: dict[str, JobSignals]) -> list[tuple[str, Command]]:
        if isinstance(d, Done):
            rec.state, rec.reason, rec.best, rec.best_value = "done", d.reason, d.best, d.value
            best = rec.trial(d.best).job if d.best is not None else None
            log.info("sweep_done", sweep=rec.name, best=best, objective=d.value, reason=d.reason)
            return []
        t = rec.trial(d.member)
        if isinstance(d, Keep):
            t.judged_at = d.iteration
            self.journal(t.job, "member_kept", sweep=rec.name, member=t.number, iteration=d.iteration, rank=d.rank,
                         of=d.of, why=d.why)
            return []
        source = rec.trial(d.source)
        t.judged_at, t.exploits = d.iteration, t.exploits + 1
        t.exploit = {"phase": "reload", "source": d.source, "source_job": source.job, "at": d.iteration,
                     "from_iteration": d.source_checkpoint, "old": dict(d.old), "new": dict(d.new),
                     "decided_at": time.time(), "started_attempt": None}
        t.values = dict(d.new)
        self.journal(t.job, "member_exploit", sweep=rec.name, member=t.number, iteration=d.iteration, rank=d.rank,
                     of=d.of, source=d.source, source_job=source.job, source_iteration=d.source_checkpoint,
                     old=dict(d.old), new=dict(d.new),
                     detail=f"rank {d.rank} of {d.of}: copies {source.job}'s checkpoint (iteration "
                            f"{d.source_checkpoint}) and goes on with perturbed values")
        self.pending.append(lambda: self._rewrite(rec, spec, t))
        return []

    # ---- an exploit, step by step ---------------------------------------------------------------------------------
    def _exploit_step(self, rec: SweepRecord, spec: SweepSpec, t: TrialRecord, by_name: dict[str, JobSignals],
                      series: dict[int, Series]) -> tuple[list[tuple[str, Command]], bool]:
        ex, sig = t.exploit, by_name.get(t.job)
        assert ex is not None
        if sig is not None and sig.state == JobState.COMPLETED and ex["phase"] == "resume" \
                and sig.attempt == (ex["started_attempt"] or 0):
            # its launch copied a checkpoint at max_iterations (the source had finished): done, nothing to train
            self._done(rec, t, ex, copied=True)
            return [], True
        if sig is None or sig.state in (JobState.COMPLETED, JobState.FAILED):
            t.exploit = None  # its job ended (or went) meanwhile: nothing to carry out
            return [], True
        if ex["phase"] == "reload":
            if list(sig.cfg.extra_args) != member_extra_args(spec, t):
                # (again after a restart: the same text; the reload is asked again)
                self.pending.append(lambda: self._rewrite(rec, spec, t))
                return [], False
            source = by_name.get(ex["source_job"])
            dirs = source.checkpoint_dirs if source is not None else ()
            ex["phase"], ex["started_attempt"], ex["source_dirs"] = "resume", sig.attempt, list(dirs)
            return [(t.job, self._resume(rec, t, ex, dirs))], True
        # "resume": sent. A later attempt that trains from a copy of the source has carried it out.
        started = ex["started_attempt"] or 0
        if sig.attempt > started and sig.state == JobState.RUNNING:
            if not _from_copy_of(sig.resumed_from, ex["source_job"]):
                # a restart of its own came first (its trainer crashed, the command found it backing off): the
                # exploit is still to be carried out, from this attempt
                ex["started_attempt"], ex["resend"] = sig.attempt, 0
                return [(t.job, self._resume(rec, t, ex, tuple(ex.get("source_dirs") or ())))], True
            self._done(rec, t, ex, copied=True)
            series[t.number] = Series()  # its objective so far was another policy's
            t.objective = None
            return [], True
        if sig.attempt != started or sig.state not in (JobState.RUNNING, JobState.STOPPED):
            return [], False  # under way: saving, backing off, queued, starting
        # still the attempt it was sent at, training or at rest: the command was not taken (another stop was under
        # way, a supervisor restart came between the saved decision and the send), or, at rest after a resend, the
        # launch found no copy to make (Settle.STOPPED; its job's events say why)
        if ex.get("resend", 0) >= (1 if sig.state == JobState.STOPPED else RESENDS):
            self._done(rec, t, ex, copied=False)
            if sig.state == JobState.STOPPED:
                return [(t.job, Start(Origin.SWEEP, f"sweep {rec.name}: member {t.number} goes on from its own "
                                                    "checkpoint with its new values (no copy of its source)"))], True
            return [], True
        ex["resend"] = ex.get("resend", 0) + 1
        return [(t.job, self._resume(rec, t, ex, tuple(ex.get("source_dirs") or ())))], True

    def _resume(self, rec: SweepRecord, t: TrialRecord, ex: dict[str, Any],
                dirs: tuple[str, ...] | list[str]) -> Command:
        return ResumeFrom(Origin.SWEEP, f"sweep {rec.name}: member {t.number} exploits member {ex['source']} "
                                        f"({ex['source_job']})", ex["source_job"], tuple(dirs))

    def _done(self, rec: SweepRecord, t: TrialRecord, ex: dict[str, Any], copied: bool) -> None:
        entry = {"time": time.time(), "at": ex["at"], "from": ex["source"], "from_job": ex["source_job"],
                 "from_iteration": ex["from_iteration"], "old": ex["old"], "new": ex["new"], "copied": copied}
        t.lineage = (t.lineage + [entry])[-LINEAGE_KEPT:]
        t.exploit = None
        if copied:
            t.judged_at = ex["from_iteration"]  # it goes on at its source's iteration (as Ray's PBT)
        self.journal(t.job, "member_exploited" if copied else "member_exploit_failed", sweep=rec.name,
                     member=t.number, source=ex["source"], source_job=ex["source_job"],
                     source_iteration=ex["from_iteration"], values=ex["new"],
                     detail=("training again from the copy with its new values" if copied else
                             "no copy of its source could be made: it goes on from its own checkpoint"))

    def _rewrite(self, rec: SweepRecord, spec: SweepSpec, t: TrialRecord) -> None:
        """The member's job file with its values now (its owner's, as written at the submit), and a reload asked."""
        path = job_file(Path(rec.base_dir), t.job)
        try:
            st = path.stat()
            table = tomllib.loads(path.read_text())["jobs"][0]
            wanted = member_extra_args(spec, t)
            if list(table.get("extra_args") or []) == wanted:
                return  # written before (a reload asked then is still to come, or the next start reads it)
            table["extra_args"] = wanted
            write_atomically(path, toml_job_file(table, trial_header(spec, t.number, dict(t.values))),
                             (st.st_uid, st.st_gid))
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            log.error("member_file_unwritable", sweep=rec.name, job=t.job, path=str(path), error=str(exc),
                      detail="its exploit waits; fix the file's directory and it goes on")
            return
        self.request_reload()
