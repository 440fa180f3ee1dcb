"""The parts of one job's runner (runner.py wires them; jobs/machine.py decides, the runner applies):

  setting.py     the job's config and resolved workflow, shared by the parts; its checkpoint timeline
  record.py      the job's saved document (history = facts, model = decisions) and its event journal
  planner.py     plans attempt N: a LaunchPlan, a refusal for the machine, or a wait for the backup
  starter.py     carries a plan out: the token saved first, the spare's hand-off or the runtime's start
  observer.py    turns the runtime's poll, the TensorBoard tail and the shim's events into messages
  recovery.py    what a supervisor start finds (a live trainer, an unfinished launch), said as messages
  crashpoint.py  the crash test's seam at the effect boundaries
  deadlines.py, launch_watch.py  the waits of a launch and the starting attempt held to them
  reset.py       `isaacd reset`'s act at the fresh launch
  spare.py       the warm spare, waiting to take an attempt over; spare_mode.py which spare a job gets (pure);
                 spare_effects.py what the keeper decides (start one, kill one) and runner.apply_spare does
  job_status.py  the job's JobStatus, built from the parts at each publish
  exit_tail.py   the tail of the trainer's output that explains an exit; config_fault.py an error in it that no
                 restart can fix
"""
