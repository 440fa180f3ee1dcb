"""A preemption of the real Isaac Lab 3.0.0 (issue 31), on this CPU machine: the queue stops a placed rsl_rl job for a
higher priority, Isaac Lab's runner saves at the next iteration boundary through the shim, the job waits in the
queue, then resumes from that save and completes at exactly max_iterations: 0 iterations lost.

The GPUs are a scripted H200 host (one GPU with room: the others hold another team's process); Isaac Lab trains on
the CPU (device = "cpu"), as every real-Isaac-Lab test here does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import builtin_job, wait_for, write_config
from isaaclab3_helpers import BOOT, events, run_dirs, started, steps
from test_isaaclab3_real import _real_isaaclab, il3_job  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.slow, pytest.mark.isaaclab3]

GiB = 2**30


def test_real_isaac_lab_preempted_saves_waits_resumes_and_completes_exactly(tmp_path, supervisor_factory):
    busy = [{"t": 0, "gpu": g, "memory_used_bytes": 135 * GiB} for g in range(1, 8)]
    (tmp_path / "gpu.json").write_text(json.dumps({"gpus": 8, "events": busy}))
    total = 16
    cfg = write_config(tmp_path, il3_job("cp", max_iterations=total, gpu_memory="80GiB", spare=False)
                       + builtin_job("urgent", gpu_memory="80GiB", device="cpu", priority=10, max_iterations=4,
                                     autostart=False, spare=False),
                       extra="[queue]\nmin_run_seconds = 1\n")
    cfg.write_text(cfg.read_text().replace(
        '[gpu]\nsource = "none"\n', '[gpu]\nsource = "scripted"\nscript = "gpu.json"\nsample_interval = 0.2\n'))
    sp = supervisor_factory(cfg)
    wait_for(lambda: (x := sp.job("cp"))["state"] == "running" and (x["iteration"] or 0) >= 4, BOOT,
             what="Isaac Lab training on GPU 0")
    assert sp.job("cp")["queue"]["placement"] == [0]

    sp.cli("start", "urgent")  # a higher priority that does not fit beside it: cp is preempted
    wait_for(lambda: sp.job("cp")["state"] == "queued", 120, what="cp saved and back in the queue")
    preempted = events(sp, "cp", "preempted")[0]
    saved = events(sp, "cp", "trainer_saved_on_stop")[-1]
    assert preempted["by"] == "urgent" and events(sp, "cp", "exited")[-1]["code"] == 0
    assert saved["iteration"] == steps(run_dirs(sp, "cp")[0])[-1]  # its last trained iteration is saved

    for name in ("urgent", "cp"):
        j = wait_for(lambda: (x := sp.job(name))["state"] in ("completed", "failed") and x, 600, what=f"{name} done")
        assert j["state"] == "completed", j["state_reason"]
    runs = started(sp, "cp")
    assert len(runs) == 2 and runs[1]["resume_from"]["iteration"] == saved["iteration"]
    argv = runs[1]["argv"]
    assert argv[argv.index("--max_iterations") + 1] == str(total - saved["iteration"])
    logged = [steps(d) for d in run_dirs(sp, "cp")]
    assert set().union(*map(set, logged)) == set(range(total)) and logged[1][0] == saved["iteration"]
    assert sp.job("cp")["restarts"] == 0 and sp.job("cp")["queue"]["preemptions"] == 1
    print(f"real Isaac Lab 3.0 preempted at iteration {saved['iteration']} of {total}: 0 iterations lost, "
          f"resumed from {Path(saved['checkpoint']).name}")
