"""The parts of one job's runner (runner.py wires them; jobs/machine.py decides, the runner applies):

  setting.py     the job's config and resolved workflow, shared by the parts; its checkpoint timeline
  record.py      the job's saved document (history = facts, model = decisions) and its event journal
  planner.py     plans attempt N: a LaunchPlan, a refusal for the machine, or a wait for the backup
  starter.py     carries a plan out: the token saved first, the spare's hand-off or the runtime's start
  observer.py    turns the runtime's poll, the TensorBoard tail and the shim's events into messages
  recovery.py    what a supervisor start finds (a live trainer, an unfinished launch), said as messages
  crashpoint.py  the crash test's seam at the effect boundaries
"""
