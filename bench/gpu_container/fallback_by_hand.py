#!/usr/bin/env python3
"""Run, by hand, the `podman run` command line that the `.service` fallback (Podman < 4.4, no
Quadlet) generates for a job, playing systemd's part, and check the container trains on the GPU.

What systemd would do for the unit and this script does instead (no systemd as PID 1 here):
a cgroup for the unit (`/sys/fs/cgroup/<unit>`, Delegate=yes), NOTIFY_SOCKET for Type=notify,
PODMAN_SYSTEMD_UNIT, the %t/%N/%n specifiers; then ExecStart= exactly as written, READY=1 and
MAINPID (conmon) from the notify socket, and ExecStop= at the end.

    fallback_by_hand.py CONFIG JOB OUT_DIR [--seconds 40]

Writes OUT_DIR/fallback.service (the unit), OUT_DIR/fallback.json (figures) and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from isaacd.runtimes import trainer_command
from isaacd.config.schema import load_config
from isaacd.metrics.attribution import attribute_pids
from isaacd.runtimes.base import LaunchSpec
from isaacd.runtimes.container_spec import ContainerSpec
from isaacd.runtimes.host import podman_binary
from isaacd.runtimes.quadlet import render_service, unit_name
from isaacd.runtimes.unit_syntax import sd_split
from isaacd.observations.checkpoints import list_checkpoints, newest_complete
from isaacd.workflows import resolve
from isaacd.status import JobStatus




def exec_line(text: str, key: str, unit: str) -> list[str]:
    line = next(ln for ln in text.splitlines() if ln.startswith(key + "="))
    cmd = line.split("=", 1)[1]
    cmd = cmd.replace("%%", "\x00").replace("%t", "/run").replace("%N", unit).replace("%n", unit + ".service")
    return [w.replace("\x00", "%").replace("$$", "$") for w in sd_split(cmd)]


def newest_checkpoint(exp: Path):
    runs = sorted((p for p in exp.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime) if exp.is_dir() else []
    for run in reversed(runs):
        c = newest_complete(run)
        if c:
            return c
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("config")
    ap.add_argument("job")
    ap.add_argument("out", type=Path)
    ap.add_argument("--seconds", type=float, default=40)
    a = ap.parse_args()
    cfg = load_config(a.config)
    job = next(j for j in cfg.jobs if j.name == a.job)
    exp = resolve(job).workflow.experiment_dir(job)
    resume = newest_checkpoint(exp)
    args = trainer_command.trainer_args(job, resume)
    spec = LaunchSpec(job=job, argv=[], trainer_args=args, env={}, cwd=Path("/"), log_path=Path("/dev/null"), attempt=1)
    cs = ContainerSpec.from_launch(spec, "byhand" + os.urandom(5).hex(), 1)
    podman = podman_binary() or "/usr/bin/podman"
    text = render_service(cs, podman=podman)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "fallback.service").write_text(text)
    base = unit_name(job.name).removesuffix(".service")
    start = exec_line(text, "ExecStart", base)
    stop = exec_line(text, "ExecStop", base)
    res: dict = {"unit": unit_name(job.name), "execstart": start, "execstop": stop,
                 "resume_from": resume.as_json() if resume else None, "privileged": "--privileged" in start}
    print("ExecStart as systemd would run it:\n  " + " ".join(start), flush=True)

    # systemd's part: the unit's cgroup (Delegate=yes), NOTIFY_SOCKET, PODMAN_SYSTEMD_UNIT
    cg = Path("/sys/fs/cgroup") / unit_name(job.name)
    cg.mkdir(exist_ok=True)
    notify = a.out / "notify.sock"
    notify.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(notify))
    sock.settimeout(120)
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID")}
    env.update(NOTIFY_SOCKET=str(notify), PODMAN_SYSTEMD_UNIT=unit_name(job.name))
    before = {p.name for p in exp.iterdir()} if exp.is_dir() else set()
    t0 = time.time()
    r = subprocess.run(["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", *start], env=env,
                       capture_output=True, text=True, timeout=180)
    res["execstart_rc"] = r.returncode
    res["execstart_stderr"] = r.stderr[-2000:]
    if r.returncode != 0:
        print("ExecStart failed:", r.stderr, file=sys.stderr)
        (a.out / "fallback.json").write_text(json.dumps(res, indent=1))
        return 1
    msgs = ""
    while "READY=1" not in msgs:
        msgs += sock.recv(4096).decode() + "\n"
    res["notify"] = msgs.split()
    res["ready_after_s"] = round(time.time() - t0, 2)
    mainpid = int(next(m.split("=")[1] for m in msgs.split() if m.startswith("MAINPID=")))
    res["mainpid_comm"] = Path(f"/proc/{mainpid}/comm").read_text().strip()
    cid = Path(f"/run/{base}.cid").read_text().strip()
    insp = json.loads(subprocess.run([podman, "inspect", cid], capture_output=True, text=True).stdout)[0]
    res["container"] = {"id": cid[:12], "privileged": insp["HostConfig"].get("Privileged"),
                        "devices": insp["HostConfig"].get("Devices"), "cgroup_parent": insp["HostConfig"].get("CgroupParent"),
                        "pid": insp["State"]["Pid"]}
    print(f"READY after {res['ready_after_s']} s, MAINPID {mainpid} ({res['mainpid_comm']}), container {cid[:12]}",
          flush=True)

    # training on the GPU: NVML processes, utilisation, the job attributed by the unit's cgroup
    import pynvml

    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    utils, attributed, procs_seen = [], {}, []
    t_end = time.time() + a.seconds
    while time.time() < t_end:
        time.sleep(1)
        try:
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        except pynvml.NVMLError:
            procs = []
        if procs:
            procs_seen = [(p.pid, p.usedGpuMemory) for p in procs]
            utils.append(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            # the systemd runtime's job record carries the unit's ControlGroup; nothing else here
            attributed = attribute_pids([p.pid for p in procs], [JobStatus(name=job.name, cgroup="/" + cg.name)])
    pynvml.nvmlShutdown()
    new_runs = sorted({p.name for p in exp.iterdir()} - before)
    ckpts = [c.iteration for run in new_runs for c in list_checkpoints(exp / run)]
    res.update(gpu_processes=procs_seen, gpu_util_samples=utils, attributed_by_cgroup=attributed,
               proc_cgroup={str(pid): Path(f"/proc/{pid}/cgroup").read_text().strip() for pid, _ in procs_seen
                            if Path(f"/proc/{pid}").exists()},
               new_run_dirs=new_runs, new_checkpoints=sorted(ckpts))
    # fps from the trainer's TensorBoard events in the new run dir
    try:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        ea = EventAccumulator(str(exp / new_runs[-1]))
        ea.Reload()
        fps = [e.value for e in ea.Scalars("Perf/total_fps")]
        its = [e.step for e in ea.Scalars("Perf/total_fps")]
        res["fps_last"] = fps[-5:]
        res["iterations"] = [its[0], its[-1]] if its else []
    except Exception as exc:  # noqa: BLE001
        res["fps_error"] = str(exc)
    r = subprocess.run(stop, env=env, capture_output=True, text=True, timeout=120)
    res["execstop_rc"] = r.returncode
    res["container_gone"] = subprocess.run([podman, "container", "exists", cid]).returncode == 1
    sock.close()
    notify.unlink(missing_ok=True)
    (a.out / "fallback.json").write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k not in ("execstart", "execstop", "execstart_stderr")},
                     indent=1))
    ok = bool(attributed) and bool(ckpts or res.get("iterations")) and res["execstop_rc"] == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
