"""runtime = "ray" with a backup target on a node that does not share the job's log_root (issue 22), writing the
bucket as the head supervisor's one writer through the attempt's token (issue 28).

The node's half runs for real: the TrainerActor's code (as a Ray worker runs it on its node) with the supervisor's
own choice of checkpoint. All nodes of the local test cluster (tests/test_ray_runtime.py) share this machine's
filesystem, so a node *without* the log_root cannot be made there; here the node's log_root is empty and the
supervisor's storage marker absent, which is exactly what such a node sees. (Without a backup target such a node
is still refused: tests/test_ray_runtime.py::test_actor_refuses_a_log_root_that_is_not_shared.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from backup_fakes import fake_checkpoint
from helpers import wait_for

from isaacd.config.backup import BackupConfig
from isaacd.backup.keeper import Fetching, JobBackup
from isaacd.backup.lease import Identity
from isaacd.backup.remote import BACKUP_ENV, NodeBackup
from isaacd.backup.uploader import Run, sha256_of
from isaacd.runtimes.ray_actor import TrainerActor
from isaacd.observations.checkpoints import RSL_RL_LAYOUT
from isaacd.workflows.rsl_rl import RslRl
from isaacd.workflows.base import Generation

TRAINER = """
import hashlib, json, os, sys
sys.path.insert(0, {tests!r})
from backup_fakes import fake_checkpoint
resume = {resume!r}
print("resumed", hashlib.sha256(open(resume, "rb").read()).hexdigest())
print("env has backup:", any(k.startswith("ISAACD_BACKUP") for k in os.environ))
run = {run!r}
with open(os.environ["ISAACD_SHIM_EVENTS"], "a") as fh:
    fh.write(json.dumps({{"event": "runner_started", "run_dir": run, "start_iteration": 4}}) + "\\n")
from pathlib import Path
fake_checkpoint(Path(run) / "model_6.pt", 6)
"""


def test_a_node_without_the_shared_log_root_resumes_from_the_bucket_and_uploads_its_run(tmp_path):
    cfg = BackupConfig(url=f"file://{tmp_path / 'bucket'}")
    exp = tmp_path / "logs" / "rsl_rl" / "cp"
    # an earlier attempt on another node left checkpoints in the bucket (that node is gone)
    old_run = tmp_path / "lost-node" / "2026-01-01_00-00-00_cp"
    for i in (2, 4):
        fake_checkpoint(old_run / f"model_{i}.pt", i)
    first = JobBackup(cfg, "cp", RSL_RL_LAYOUT)
    first.uploader.set_runs([Run(old_run)])
    first.uploader.one_pass()

    # the supervisor on the head: no checkpoint in its log_root, so the bucket's newest, verified; it holds the
    # prefix's lease (issue 28), and the node writes for it as the attempt's token
    head = JobBackup(cfg, "cp", RSL_RL_LAYOUT, identity=Identity("head-machine", str(tmp_path / "state")))
    assert isinstance(head.restore(None, exp), Fetching)
    resume = wait_for(lambda: (r := head.restore(None, exp)) and not isinstance(r, Fetching) and r, 30,
                      what="the head's fetch")
    assert resume.iteration == 4 and resume.path == exp / old_run.name / "model_4.pt"
    env = head.node_env(RslRl(Generation(2, 3, "test"), "store_true"), resume, token="t1")
    env["ISAACD_SHIM_EVENTS"] = str(tmp_path / "head-shim.jsonl")
    want = sha256_of(resume.path)
    resume.path.unlink()  # the node's log_root: empty (not the head's volume), no storage marker either

    actor = TrainerActor("cp", "t1")
    new_run = exp / "2026-01-02_00-00-00_cp"
    script = TRAINER.format(tests=str(Path(__file__).parent), resume=str(resume.path), run=str(new_run))
    root = tmp_path / "logs"
    res = actor.launch([sys.executable, "-c", script], env, str(tmp_path / "wd"), str(root),
                       str(root / ".isaacd-storage-check"), "nonce", str(tmp_path / "own"))
    assert res["ok"] and res["backup_on_node"], res
    st = wait_for(lambda: (s := actor.status(0, 0))["state"] == "exited" and not s["more"] and s, 60,
                  what="the trainer's exit after the node's last upload")
    assert st["code"] == 0, st["out"]
    out = st["out"].decode()
    assert f"resumed {want}" in out, out  # the trainer loaded the bucket's bytes, fetched on the node
    assert "env has backup: False" in out  # the node's backup settings are not the trainer's business

    manifest = json.loads((tmp_path / "bucket" / "cp" / "manifest.json").read_text())
    newest = manifest["checkpoints"][0]
    assert (newest["run"], newest["iteration"]) == (new_run.name, 6), manifest
    assert newest["sha256"] == sha256_of(new_run / "model_6.pt")
    assert st["backup"]["last_upload"]["iteration"] == 6 and st["backup"]["error"] is None
    # one writer: the head's lease names its instance, and this attempt's token as the node that writes for it
    lease = json.loads((tmp_path / "bucket" / "cp" / "lease.json").read_text())
    assert lease["holder"]["machine_id"] == "head-machine" and lease["delegate"] == "t1"
    # a node of another attempt (an old one, still draining) writes nothing
    spec = json.loads(env[BACKUP_ENV])
    spec["writer"]["token"] = "t0"
    stale = NodeBackup({BACKUP_ENV: json.dumps(spec)})
    fake_checkpoint(new_run / "model_8.pt", 8)
    stale.uploader.set_runs([Run(new_run)])
    stale.uploader.one_pass()
    assert "t0" in (stale.uploader.blocked or "") and stale.uploader.uploads_total == 0, stale.uploader.blocked
    assert json.loads((tmp_path / "bucket" / "cp" / "manifest.json").read_text())["checkpoints"][0]["iteration"] == 6
    head.close()

