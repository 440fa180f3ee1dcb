#!/usr/bin/env python3
"""The real Isaac Lab 3.0 (pip form) under the real `isaacd run`: start-up, kill -9 -> back to training, stop, start.

One supervised job trains Isaac-Cartpole-Direct with upstream's own entry point (`<python> <shim> -m isaaclab train
--rl_library rsl_rl ...`, `launcher = [--python]`, no checkout), in the process runtime or in Podman
(`runtime = "podman"`, `image = "/:O"`: an overlay of this host's root, so the same Python and assets are inside;
CDI `nvidia.com/gpu=<--gpus>` on a GPU host). A supervisor subprocess with its own temp config and state dir, talked
to over its control socket (`isaacd.control.request`) and through the `isaacd` command line. Measured:

  (a) start-up      `isaacd run` / the launch -> the trainer's first iteration (the shim's `first_iteration` event)
  (b) --kills x     kill -9 of the trainer: -> new pid, -> training again (the new attempt's `first_iteration`, and
                    the first new TensorBoard step as `isaacd status` shows it), iterations redone (last step the
                    killed run logged - the step the resumed run starts at + 1: rsl_rl re-runs the loaded one),
                    resume point (snapshot or checkpoint), warm spare or cold start
  (c) isaacd stop   -> `stopped`: the iteration the shim saved, the trainer's exit code, seconds
  (d) isaacd start  -> `completed` at exactly --max-iterations; TensorBoard steps across the job's run dirs exactly
                    0..N-1 (checked and reported)

Writes --out (JSON, rewritten after every phase so a run cut short still leaves its figures) and prints a table.

    .venv/bin/python bench/isaaclab3_recovery.py --python .venv-isaaclab3/bin/python --device cpu \\
        --num-envs 16 --max-iterations 40 --kills 2 --out /tmp/il3.json
    .venv/bin/python bench/isaaclab3_recovery.py ... --runtime podman          # image "/:O", device cpu here
    python3 bench/isaaclab3_recovery.py --python python3 --device cuda:0 --num-envs 1024 --runtime podman --gpus 0

Needs isaacd importable by the interpreter that runs this (and tensorboard, for the step check); pytest is not used.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from isaacd.control import request

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _supervised import CLK_TCK, cpu_ticks  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
JOB = "il3"
TASK = "Isaac-Cartpole-Direct"


class Deadline(Exception):
    pass


def host_cpu_ticks() -> list[int]:
    """The host's CPU time by kind (user nice system idle iowait irq softirq steal ...), /proc/stat's "cpu" line."""
    return [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]


def gpu_sm_util_by_pid(gpu_index: int, since_s: float) -> dict[int, int] | None:
    """The highest SM utilisation (%) NVML sampled for each process on the GPU since `since_s` (epoch seconds), or
    None where there is no NVML or the driver keeps no per-process samples. NVML returns one sample per process "that
    had some non-zero utilization during the last sample period" (NVML API reference, nvmlDeviceGetProcessUtilization),
    so a parked spare that holds a CUDA context but submits no work has no entry at all."""
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(gpu_index)
            samples = pynvml.nvmlDeviceGetProcessUtilization(h, int(since_s * 1e6))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no pynvml, no GPU, or NVML_ERROR_NOT_FOUND (no samples since then)
        return None
    out: dict[int, int] = {}
    for x in samples:
        out[x.pid] = max(out.get(x.pid, 0), int(x.smUtil))
    return out


class Bench:
    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.t_begin = time.time()
        self.deadline = self.t_begin + a.deadline if a.deadline else float("inf")
        base = Path(a.workdir) if a.workdir else None
        if base:
            base.mkdir(parents=True, exist_ok=True)
        self.w = Path(tempfile.mkdtemp(prefix=f"isaacd-il3-{a.runtime}-", dir=base)).resolve()
        self.cfg = self.w / "isaacd.toml"
        self.sock = self.w / "isaacd.sock"
        self.state = self.w / "state"
        self.logs = self.w / "logs"
        self.sup: subprocess.Popen[bytes] | None = None
        self.podman_service: subprocess.Popen[bytes] | None = None
        self.podman_url = f"unix://{self.w}/podman.sock"
        self.res: dict[str, Any] = {"errors": []}

    # ---- plumbing ------------------------------------------------------------------------------
    def log(self, msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')} +{time.time() - self.t_begin:6.1f}s] {msg}", flush=True)

    def save(self) -> None:
        self.res["elapsed_s"] = round(time.time() - self.t_begin, 1)
        out = Path(self.a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(self.res, indent=2, default=str) + "\n")
        tmp.replace(out)

    def wait(self, pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
        """pred() until truthy; a failed job or a dead supervisor ends the wait at once (with the reason)."""
        end = min(time.time() + timeout, self.deadline)
        last: Exception | None = None
        looked = 0.0
        while time.time() < end:
            try:
                v = pred()
                if v:
                    return v
            except (OSError, ValueError, KeyError, StopIteration, RuntimeError) as exc:
                last = exc
            if self.sup is not None and self.sup.poll() is not None:
                raise RuntimeError(f"the supervisor exited ({self.sup.returncode}) while waiting for {what}")
            if self.sup is not None and time.time() - looked > 1.0:
                looked = time.time()
                try:
                    j = self.job()
                except (OSError, RuntimeError, StopIteration):
                    j = {}
                if j.get("state") == "failed":
                    raise RuntimeError(f"the job failed while waiting for {what}: {j.get('state_reason')}")
            time.sleep(interval)
        why = "the bench's --deadline" if time.time() >= self.deadline else f"{timeout:.0f} s"
        raise Deadline(f"gave up waiting for {what} after {why}" + (f" (last error: {last})" if last else ""))

    def status(self) -> dict[str, Any]:
        return request(self.sock, {"cmd": "status"}, timeout=5)

    def job(self) -> dict[str, Any]:
        return next(j for j in self.status()["jobs"] if j["name"] == JOB)

    def events(self, kind: str | None = None, job: str = JOB) -> list[dict[str, Any]]:
        evs = request(self.sock, {"cmd": "events", "job": job}, timeout=10)
        return [e for e in evs if kind is None or e["event"] == kind]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "isaacd", "--config", str(self.cfg), *args], capture_output=True,
                              text=True, timeout=120, env=self.env())

    def shim_events(self, attempt: int, job: str = JOB) -> list[dict[str, Any]]:
        p = self.state / "shim" / job / f"attempt-{attempt}.jsonl"
        out = []
        try:
            for line in p.read_text(errors="replace").splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        except OSError:
            pass
        return out

    def shim_event(self, attempt: int, kind: str, job: str = JOB) -> dict[str, Any] | None:
        return next((e for e in self.shim_events(attempt, job) if e.get("event") == kind and not e.get("rank")), None)

    def started(self) -> list[dict[str, Any]]:
        return self.events("started")

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}
        if self.a.runtime == "podman":
            env["ISAACD_PODMAN_URL"] = self.podman_url
        return env

    # ---- the job ---------------------------------------------------------------------------------
    def container_volumes(self) -> list[str]:
        """Paths the trainer needs that an overlay of / does not show (they sit on other mounts than /), plus
        the Warp kernel cache (a fresh container would compile every kernel again: ~2 min on a fresh H200)."""
        a = self.a
        want: list[Path] = []
        py = Path(shutil.which(a.python) or a.python)
        want += [py.parent.parent, py.resolve().parent.parent]  # a venv and the interpreter it links to
        want += [Path(p) for p in os.environ.get("PYTHONPATH", "").split(":") if p]
        want.append(Path(a.asset_root))
        vols: list[str] = []
        for p in want:
            p = p.resolve()
            if not p.exists():
                continue
            if mount_point(p) != Path("/") and not any(p == Path(v.split(":")[0]) or Path(v.split(":")[0]) in p.parents
                                                        for v in vols):
                vols.append(f"{p}:{p}:ro")
        if a.warp_cache:
            cache = Path(a.warp_cache).expanduser().resolve()
            cache.mkdir(parents=True, exist_ok=True)
            vols.append(f"{cache}:{cache}")
        vols += a.volume
        return vols

    def write_config(self) -> None:
        a = self.a
        env = {"ISAACSIM_ASSET_ROOT": str(Path(a.asset_root).resolve())}
        if os.environ.get("PYTHONPATH"):  # e.g. /tmp/site on the H200: isaaclab and isaacd live there
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        if a.warp_cache:  # one Warp kernel cache for every run (--warp-cache "": the job's own, compile_caches.py)
            env["WARP_CACHE_PATH"] = str(Path(a.warp_cache).expanduser().resolve())
        job: dict[str, Any] = {
            "workflow": "rsl_rl", "launcher": [a.python], "task": TASK, "num_envs": a.num_envs,
            "max_iterations": a.max_iterations, "save_interval": a.save_interval, "seed": 42, "device": a.device,
            "log_root": str(self.logs), "stop_timeout": 90.0, "runtime": a.runtime,
        }
        if a.runtime == "podman":
            # isaacd reads a pip install's generation by running the launcher on the host; the launcher of a
            # container job lives in the image, and a rootfs image has no tag to read it from: say it
            job["isaaclab_version"] = a.isaaclab_version or "3.0"
        elif a.isaaclab_version:
            job["isaaclab_version"] = a.isaaclab_version
        if a.runtime == "process" and a.no_spare:
            job["spare"] = False
        elif a.spare:
            job["spare"] = a.spare  # auto | booted | imports | off (issue 21: "booted" parks a second environment)
        if a.spare_preload:
            job["spare_preload"] = a.spare_preload
        if a.runtime == "podman" and a.gpus:
            job["gpus"] = [int(g) if g.isdigit() else g for g in a.gpus.split(",")]
        lines = ["[supervisor]", f'state_dir = "{self.state}"', f'control_socket = "{self.sock}"',
                 'log_format = "json"', "[metrics]", "enabled = false", "[gpu]",
                 f'source = "{a.gpu_source or ("nvml" if a.device.startswith("cuda") else "none")}"',
                 "", "[[jobs]]", f'name = "{JOB}"']
        lines += [f"{k} = {json.dumps(v)}" for k, v in job.items()]
        lines += ["[jobs.environment]"] + [f"{k} = {json.dumps(v)}" for k, v in env.items()]
        if a.runtime == "podman":
            self.res["container_volumes"] = vols = self.container_volumes()
            lines += ["[jobs.container]", f"image = {json.dumps(a.image)}", f'shm_size = "{a.shm_size}"',
                      f"volumes = {json.dumps(vols)}"]
        # crash recovery is measured here, not the watchdogs: a value-loss spike right after a resume of a barely
        # trained cart-pole would trip the divergence rollback, and a small task leaves an H200 mostly idle
        lines += ["[jobs.watchdogs.divergence]", "enabled = false", "[jobs.watchdogs.duty_cycle]", "enabled = false"]
        self.cfg.write_text("\n".join(lines) + "\n")

    # ---- the story -------------------------------------------------------------------------------
    def start_supervisor(self) -> None:
        if self.a.runtime == "podman":
            podman = shutil.which("podman")
            if podman is None:
                raise RuntimeError("--runtime podman: no podman binary on PATH")
            self.podman_service = subprocess.Popen(
                [podman, "system", "service", "--time=0", self.podman_url], stdin=subprocess.DEVNULL,
                stdout=open(self.w / "podman-service.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True,
                cwd="/")
            self.wait(lambda: Path(self.podman_url.removeprefix("unix://")).exists(), 30, "the podman API socket")
        self.log(f"isaacd run --config {self.cfg}")
        self.t_run = time.time()
        self.sup = subprocess.Popen([sys.executable, "-m", "isaacd", "run", "--config", str(self.cfg)],
                                    stdout=open(self.w / "supervisor.log", "ab"), stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=self.w, env=self.env())
        self.wait(self.status, 60, "the supervisor's control socket", interval=0.1)

    def phase_startup(self) -> None:
        s = self.wait(lambda: self.started(), 120, "the first launch")[0]
        self.res["argv_fresh"] = s["argv"]
        self.log(f"attempt 1 started (pid {s.get('pid')}): {' '.join(s['argv'])}")
        fi = self.wait(lambda: self.shim_event(1, "first_iteration"), self.a.boot_timeout, "the first iteration",
                       interval=0.2)
        ev = {e["event"]: round(e["time"] - s["time"], 2) for e in reversed(self.shim_events(1))}
        self.res["startup"] = {
            "isaacd_run_to_first_iteration_s": round(fi["time"] - self.t_run, 2),
            "launch_to_first_iteration_s": round(fi["time"] - s["time"], 2),
            "shim_events_after_launch_s": ev,
        }
        self.log(f"first iteration {fi['time'] - s['time']:.1f} s after the launch "
                 f"({fi['time'] - self.t_run:.1f} s after `isaacd run`)")

    def expect_spare(self) -> bool:
        # process runtime: a spare unless switched off (auto); podman: when asked for (the podman runs without
        # --spare measure cold container restarts, `--spare off` in bench/isaaclab3_h200.sh)
        if self.a.runtime == "podman":
            return self.a.spare in ("auto", "booted", "imports")
        return not self.a.no_spare and self.a.spare != "off"

    def phase_throughput(self) -> None:
        """Training speed with the spare as configured, parked beside the trainer (a booted spare holds a second
        environment): the median of rsl_rl's Perf/total_fps over --throughput-iterations iterations, counted
        from --throughput-from, or the first iteration after the spare is ready if that is later (the figure must
        compare the same iterations: a cart-pole that has learned runs longer episodes, fewer resets per step)."""
        cur = self.started()[-1]
        j = self.train_until(cur["attempt"], self.a.kill_after, self.expect_spare(), "throughput: the spare parked")
        spare = j.get("spare") or {}
        first = max(j["iteration"] + 1, self.a.throughput_from)
        if first > j["iteration"] + 1:
            self.log(f"throughput: from iteration {first} (--throughput-from)")
        last = first + self.a.throughput_iterations - 1
        # The trainer's own CPU seconds per iteration over the same window, and the host's steal share: on a shared
        # VM the wall-clock fps also moves with the hypervisor's steal time, which CPU time does not count. (On this
        # 2-core VM both still moved by 29-41 % between runs of one arm: bench/results/issue21-cpu-throughput.)
        # The spare's own CPU seconds and NVML's per-process SM samples over the window say whether the parked
        # spare does any work at all while the trainer runs (its cost would be CPU or GPU time taken from it).
        spare_pid = spare.get("pid") if isinstance(spare.get("pid"), int) else None

        def spare_cpu() -> float | None:
            try:
                return cpu_ticks(spare_pid) / CLK_TCK if spare_pid else None
            except (OSError, ValueError, IndexError):
                return None
        start = self.wait(lambda: (x := self.job())["iteration"] is not None and x["iteration"] >= first and
                          (x["iteration"], cpu_ticks(x["pid"]) / CLK_TCK, host_cpu_ticks(), spare_cpu(), time.time()),
                          self.a.boot_timeout, f"throughput: iteration {first}", interval=0.02)
        end = self.wait(lambda: (x := self.job())["iteration"] is not None and x["iteration"] >= last + 1 and
                        (x["iteration"], cpu_ticks(x["pid"]) / CLK_TCK, host_cpu_ticks(), spare_cpu(), time.time()),
                        self.a.boot_timeout, f"throughput: iteration {last + 1}", interval=0.02)
        sm = gpu_sm_util_by_pid(0, start[4]) if self.a.device.startswith("cuda") else None
        fps = [v for step, v in tb_scalars(Path(j["run_dir"]), "Perf/total_fps") if first <= step <= last]
        ticks = [b - a for a, b in zip(start[2], end[2])]
        now_job = self.job()
        trainer_pid, after = now_job.get("pid"), now_job.get("spare") or {}
        self.res["throughput"] = {
            "spare": self.a.spare or "auto", "spare_state": spare.get("state"), "spare_mode": spare.get("mode"),
            "spare_rss_bytes": spare.get("rss_bytes"), "spare_cuda_memory_bytes": spare.get("cuda_memory_bytes"),
            "spare_still_ready": after.get("state") == spare.get("state") and after.get("pid") == spare.get("pid"),
            "iterations": [first, last], "samples": len(fps),
            "median_fps": round(statistics.median(fps), 1) if fps else None,
            "trainer_cpu_seconds_per_iteration": round((end[1] - start[1]) / max(1, end[0] - start[0]), 5),
            "cpu_iterations": [start[0], end[0]],
            "host_steal_share": round(ticks[7] / max(1, sum(ticks)), 4) if len(ticks) > 7 else None,
            "window_seconds": round(end[4] - start[4], 2),
            "spare_cpu_seconds_in_window": (round(end[3] - start[3], 3)
                                            if start[3] is not None and end[3] is not None else None),
            "gpu_sm_util_max_by_pid": ({str(p): u for p, u in sm.items()} if sm is not None else None),
            "trainer_pid": trainer_pid, "spare_pid": spare_pid,
        }
        self.log(f"throughput: {self.res['throughput']}")

    def train_until(self, attempt: int, at_least: int, spare: bool, what: str) -> dict[str, Any]:
        """The job running `attempt`, its own run at step `at_least` or later (and a ready spare when asked)."""
        def ready() -> dict[str, Any] | None:
            rd = [e["run_dir"] for e in self.events("run_dir") if e.get("attempt") == attempt]
            j = self.job()
            ok = (rd and j["state"] == "running" and j["pid"] and j["run_dir"] == rd[-1]
                  and j["iteration"] is not None and j["iteration"] >= at_least)
            return j if ok else None

        j = self.wait(ready, self.a.boot_timeout, what, interval=0.1)
        if spare:
            try:
                j = self.wait(lambda: (x := self.job())["state"] == "running" and (x.get("spare") or {}).get(
                    "state") == "ready" and x, self.a.spare_wait, "a ready warm spare", interval=0.1)
            except Deadline as exc:
                self.log(f"no ready spare: {exc}; killing anyway (a cold start is measured)")
        return j

    def mid_iteration(self, j: dict[str, Any], what: str) -> tuple[dict[str, Any], float]:
        """Wait for two step changes (one iteration's length, T), then T/2 more: a crash in the middle of an
        iteration, as most crashes are. Killed right at a step instead, the snapshot of that iteration may still be
        in its writer thread and the resume goes one further back. Returns the job and T."""
        def step_after(it: int) -> dict[str, Any] | None:
            x = self.job()
            return x if x["iteration"] is not None and x["iteration"] > it and x["pid"] == j["pid"] else None

        j = self.wait(lambda: step_after(j["iteration"]), self.a.iteration_timeout * 3 + 30, f"{what}: a step",
                      interval=0.02)
        t_a = time.time()
        j = self.wait(lambda: step_after(j["iteration"]), self.a.iteration_timeout * 3 + 30, f"{what}: a step",
                      interval=0.02)
        period = time.time() - t_a
        time.sleep(period / 2)
        return j, round(period, 3)

    def phase_kill(self, k: int) -> None:
        starts = self.started()
        cur = starts[-1]
        base = (cur["resume_from"] or {}).get("iteration") or 0
        j = self.train_until(cur["attempt"], base + self.a.kill_after, self.expect_spare(),
                             f"kill {k}: iteration {base + self.a.kill_after}")
        mid = None
        if self.a.kill_at == "mid":
            j, mid = self.mid_iteration(j, f"kill {k}")
        old_pid, old_run, it_seen = j["pid"], j["run_dir"], j["iteration"]
        n_before = len(starts)
        os.kill(old_pid, signal.SIGKILL)
        t_kill = time.time()
        self.log(f"kill {k}: kill -9 {old_pid} at iteration {it_seen} (status)")
        sp = j.get("spare") or {}
        row: dict[str, Any] = {"kill": k, "killed_pid": old_pid, "killed_attempt": cur["attempt"],
                               "status_iteration_at_kill": it_seen, "killed_run_dir": old_run,
                               "kill_at": self.a.kill_at, "iteration_seconds": mid,
                               "spare_at_kill": {key: sp.get(key) for key in ("state", "mode", "pid", "rss_bytes",
                                                                           "cuda_memory_bytes", "mode_reason")}}
        self.res["kills"].append(row)
        j = self.wait(lambda: (x := self.job())["pid"] not in (None, old_pid) and x, 120, f"kill {k}: a new pid",
                      interval=0.02)
        row["kill_to_new_pid_s"] = round(time.time() - t_kill, 2)
        row["new_pid"] = j["pid"]
        s = self.wait(lambda: len(st := self.started()) > n_before and st[-1], 30, f"kill {k}: the started event")
        row["kill_to_restart_s"] = round(s["time"] - t_kill, 2)  # the supervisor's `started` event
        row["attempt"] = s["attempt"]
        row["warm_spare"] = bool(s.get("warm_spare"))
        rf = s.get("resume_from") or {}
        row["resume_from"] = rf.get("path")
        row["resume_iteration"] = rf.get("iteration")
        row["resume_kind"] = ("snapshot" if "isaacd_snapshot_" in str(rf.get("path")) else "checkpoint") if rf else None
        row["argv"] = s["argv"]
        # training again, as the supervisor records it: the new run's dir, then its first TensorBoard step
        # (read from the event file; `isaacd status` keeps showing the killed run's iteration until then)
        j = self.wait(lambda: (x := self.job())["run_dir"] not in (None, old_run) and x, self.a.boot_timeout,
                      f"kill {k}: the new run dir", interval=0.05)
        self.wait(lambda: tb_steps(Path(j["run_dir"])), self.a.boot_timeout, f"kill {k}: a TensorBoard step",
                  interval=0.1)
        row["kill_to_tensorboard_step_s"] = round(time.time() - t_kill, 2)
        fi = self.wait(lambda: self.shim_event(s["attempt"], "first_iteration"), 30, f"kill {k}: first_iteration")
        row["kill_to_first_iteration_s"] = round(fi["time"] - t_kill, 2)
        row["new_run_dir"] = j["run_dir"]
        # issue 28: the spare's ack of the go (its spare_go time minus the go's), the figure spare_ack_timeout's
        # margin rests on; None after a cold start
        took = [e for e in self.events("spare_took_over") if e.get("attempt") == s["attempt"]]
        row["spare_ack_seconds"] = took[-1].get("ack_seconds") if took else None
        ex = [e for e in self.events("exited") if e.get("attempt") == cur["attempt"]]
        if ex:
            row["exit"] = ex[-1].get("description") or ex[-1].get("detail")
            row["exit_event_iteration"] = ex[-1].get("iteration")
        self.log(f"kill {k}: new pid {row['new_pid']} after {row['kill_to_new_pid_s']} s "
                 f"({'warm spare' if row['warm_spare'] else 'cold start'}), resumed from {row['resume_kind']} "
                 f"{row['resume_iteration']}, first iteration {row['kill_to_first_iteration_s']} s, "
                 f"TensorBoard step {row['kill_to_tensorboard_step_s']} s, spare ack {row['spare_ack_seconds']} s")

    def phase_stop(self) -> None:
        cur = self.started()[-1]
        base = (cur["resume_from"] or {}).get("iteration") or 0
        j = self.train_until(cur["attempt"], base + self.a.kill_after, False, f"stop: iteration {base + self.a.kill_after}")
        self.log(f"isaacd stop at iteration {j['iteration']} (status)")
        t0 = time.time()
        r = self.cli("stop", JOB)
        row: dict[str, Any] = {"status_iteration_at_stop": j["iteration"], "cli_rc": r.returncode,
                               "attempt": cur["attempt"], "run_dir": j["run_dir"]}
        self.res["stop"] = row
        j = self.wait(lambda: (x := self.job())["state"] == "stopped" and x, self.a.stop_wait, "stopped",
                      interval=0.05)
        row["stop_to_stopped_s"] = round(time.time() - t0, 2)
        saved = self.events("trainer_saved_on_stop")
        ex = [e for e in self.events("exited") if e.get("attempt") == cur["attempt"]]
        row["saved_iteration"] = saved[-1].get("iteration") if saved else None
        sh = {e["event"]: e["time"] for e in self.shim_events(cur["attempt"])}
        if "stopped" in sh:  # the shim's own word: the checkpoint is on disk (the process then tears down)
            row["stop_to_saved_s"] = round(sh["stopped"] - t0, 2)
        row["saved_checkpoint"] = saved[-1].get("checkpoint") if saved else None
        row["exit_code"] = ex[-1].get("code") if ex else None
        row["state_reason"] = j.get("state_reason")
        self.log(f"stopped after {row['stop_to_stopped_s']} s: saved iteration {row['saved_iteration']} "
                 f"({row['saved_checkpoint']}), exit code {row['exit_code']}")

    def phase_start(self) -> None:
        n_before = len(self.started())
        t0 = time.time()
        r = self.cli("start", JOB)
        row: dict[str, Any] = {"cli_rc": r.returncode}
        self.res["start"] = row
        s = self.wait(lambda: len(st := self.started()) > n_before and st[-1], 60, "start: the started event")
        row["resume_iteration"] = (s.get("resume_from") or {}).get("iteration")
        row["resume_from"] = (s.get("resume_from") or {}).get("path")
        fi = self.wait(lambda: self.shim_event(s["attempt"], "first_iteration"), self.a.boot_timeout,
                       "start: first iteration", interval=0.2)
        row["start_to_first_iteration_s"] = round(fi["time"] - t0, 2)
        left = self.a.max_iterations - (row["resume_iteration"] or 0)
        j = self.wait(lambda: (x := self.job())["state"] in ("completed", "failed", "stopped") and x,
                      self.a.boot_timeout + 30 + left * self.a.iteration_timeout, "completed", interval=0.2)
        row["start_to_end_s"] = round(time.time() - t0, 2)
        row["state"] = j["state"]
        row["state_reason"] = j.get("state_reason")
        row["final_iteration"] = j["iteration"]
        row["restarts"] = j["restarts"]
        self.log(f"{j['state']} after {row['start_to_end_s']} s at iteration {j['iteration']} ({j.get('state_reason')})")

    def run_dirs(self, job: str = JOB) -> list[Path]:
        """The job's run dirs, first to last, from its `run_dir` events."""
        out: list[Path] = []
        for e in self.events("run_dir", job=job):
            if Path(e["run_dir"]) not in out:
                out.append(Path(e["run_dir"]))
        return out

    def check_tensorboard(self) -> None:
        dirs = self.run_dirs()
        per = [tb_steps(d) for d in dirs]
        union = set().union(*map(set, per)) if per else set()
        n = self.a.max_iterations
        tb = {"run_dirs": [{"run_dir": str(d), "first": s[0] if s else None, "last": s[-1] if s else None,
                            "count": len(s)} for d, s in zip(dirs, per)],
              "union_is_0_to_n_minus_1": union == set(range(n)),
              "last_run_ends_at_n_minus_1": bool(per and per[-1] and per[-1][-1] == n - 1),
              "steps_past_total": sorted(x for x in union if x >= n)}
        tb["ok"] = tb["union_is_0_to_n_minus_1"] and tb["last_run_ends_at_n_minus_1"] and not tb["steps_past_total"]
        if not tb["union_is_0_to_n_minus_1"]:
            tb["missing"] = sorted(set(range(n)) - union)
        self.res["tensorboard"] = tb
        # iterations redone per kill: the last step the killed run logged .. the step the resumed run starts at
        by_dir = dict(zip(dirs, per))
        for row in self.res["kills"]:
            old, new = by_dir.get(row.get("killed_run_dir")), by_dir.get(row.get("new_run_dir"))
            if old and new:
                row["last_step_killed_run"] = old[-1]
                row["first_step_resumed_run"] = new[0]
                row["iterations_redone"] = max(0, old[-1] - new[0] + 1)
        stop = self.res.get("stop")
        if stop and by_dir.get(stop.get("run_dir")):
            stop["last_step_logged"] = by_dir[stop["run_dir"]][-1]
            stop["saved_is_last_logged"] = stop.get("saved_iteration") == stop["last_step_logged"]

    def attempt_timelines(self) -> list[dict[str, Any]]:
        """Per attempt, the shim's milestones in seconds after its `shim_started` (where a launch's time goes)."""
        out = []
        for s in self.started():
            evs = [e for e in self.shim_events(s["attempt"]) if not e.get("rank")]
            if not evs:
                continue
            t0 = evs[0]["time"]
            marks = {}
            for e in evs:
                if e["event"] in ("checkpoint_loaded", "runner_started", "first_iteration", "stop_requested",
                                  "stopped", "learn_finished") and e["event"] not in marks:
                    marks[e["event"]] = round(e["time"] - t0, 2)
            out.append({"attempt": s["attempt"], "warm_spare": s.get("warm_spare"),
                        "launch_to_shim_started_s": round(t0 - s["time"], 2), **marks})
        return out

    def begin(self, **more: Any) -> None:
        """The run's arguments, environment and config, saved before anything starts."""
        self.res.update({"args": vars(self.a), "workdir": str(self.w), "environment": environment(self.a), **more})
        self.log(f"work dir {self.w}; {json.dumps(self.res['environment'])}")
        self.write_config()
        self.res["config"] = self.cfg.read_text()
        self.save()

    def run(self, body: Callable[[], None], table: Callable[[dict[str, Any]], str]) -> int:
        """The supervisor started and body() run; whatever happens, then the cleanup, the verdict, the JSON and the
        table. 0 when summarize() found the run ok."""
        try:
            self.start_supervisor()
            body()
        except Exception as exc:  # noqa: BLE001 - keep going to collect figures
            self.res["errors"].append(f"{type(exc).__name__}: {exc}")
            self.log(f"FAILED: {exc}")
        finally:
            self.cleanup()
            self.summarize()
            self.save()
        print(table(self.res), flush=True)
        return 0 if self.res["ok"] else 1

    def summarize(self) -> None:
        kills = self.res["kills"]

        def med(key: str) -> float | None:
            v = [r[key] for r in kills if isinstance(r.get(key), (int, float))]
            return round(statistics.median(v), 2) if v else None

        self.res["load_avg_end"] = os.getloadavg()
        self.res["kill_medians"] = {k: med(k) for k in ("kill_to_new_pid_s", "kill_to_restart_s",
                                                        "kill_to_first_iteration_s", "kill_to_tensorboard_step_s",
                                                        "iterations_redone")}
        st = self.res.get("start") or {}
        tb = self.res.get("tensorboard") or {}
        if self.a.throughput_iterations:  # a throughput run: its figure, nothing else
            self.res["ok"] = bool((self.res.get("throughput") or {}).get("median_fps")) and not self.res["errors"]
            return
        self.res["ok"] = bool(len(kills) == self.a.kills and all(r.get("kill_to_first_iteration_s") for r in kills)
                              and (self.res.get("stop") or {}).get("exit_code") == 0
                              and st.get("state") == "completed" and st.get("final_iteration") == self.a.max_iterations - 1
                              and tb.get("ok") and not self.res["errors"])

    def cleanup(self) -> None:
        """SIGTERM to the supervisor (it stops the trainer through the shim); past --deadline it gets 15 s."""
        self.save()
        if self.sup is not None:
            if self.sup.poll() is None:
                self.sup.send_signal(signal.SIGTERM)
            try:
                self.res["supervisor_exit"] = self.sup.wait(15 if time.time() >= self.deadline - 5 else 120)
            except subprocess.TimeoutExpired:
                os.killpg(self.sup.pid, signal.SIGKILL)
                self.res["supervisor_exit"] = self.sup.wait()
        # trainers of this run left behind (a spare, a trainer after the supervisor was killed): their command
        # line or environment names this run's work dir (ISAACD_SHIM_EVENTS, the log root)
        service = self.podman_service.pid if self.podman_service is not None else None
        for pid in [p for p in pids_mentioning(str(self.w)) if p != service]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.a.runtime == "podman":
            subprocess.run(["podman", "rm", "-f", "-i", "-v", f"isaaclab-job-{JOB}"], capture_output=True, timeout=120)
            if self.podman_service is not None:
                self.podman_service.terminate()
                try:
                    self.podman_service.wait(30)
                except subprocess.TimeoutExpired:
                    self.podman_service.kill()


def launcher_path(python: str) -> str:
    """The jobs' launcher as an absolute path: the supervisor runs in its own work dir."""
    if "/" in python:
        return str(Path(python).absolute())
    return shutil.which(python) or python


def mount_point(p: Path) -> Path:
    p = p.resolve()
    while not os.path.ismount(p):
        p = p.parent
    return p


def pids_mentioning(text: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if text.encode() in (d / "cmdline").read_bytes() or text.encode() in (d / "environ").read_bytes():
                    out.append(int(d.name))
            except OSError:
                pass
    return out


def tb_scalar_events(run_dir: Path, tag: str) -> list[Any]:
    """One scalar's events (step, wall_time, value) in a run's TensorBoard files, in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return sorted(acc.Scalars(tag), key=lambda e: e.step) if tag in acc.Tags().get("scalars", []) else []


def tb_scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of one scalar in a run's TensorBoard files, in step order."""
    return [(e.step, e.value) for e in tb_scalar_events(run_dir, tag)]


def tb_steps(run_dir: Path) -> list[int]:
    """Every iteration step a run logged to TensorBoard (rsl_rl's `.../time` tags are stepped by seconds)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out: set[int] = set()
    for f in sorted(run_dir.rglob("events.out.tfevents.*")):
        for ev in EventFileLoader(str(f)).Load():
            if any(not v.tag.endswith("/time") for v in ev.summary.value):
                out.add(ev.step)
    return sorted(out)


def environment(a: argparse.Namespace) -> dict[str, Any]:
    code = ("import importlib.metadata as m, json, sys\n"
            "v = {}\n"
            "for d in ('isaaclab', 'rsl-rl-lib', 'torch', 'warp-lang', 'newton'):\n"
            "    try: v[d] = m.version(d)\n"
            "    except Exception: v[d] = None\n"
            "v['python'] = sys.version.split()[0]\n"
            "try:\n"
            "    import torch\n"
            "    v['gpu'] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None\n"
            "except Exception as e: v['gpu'] = repr(e)\n"
            "print(json.dumps(v))\n")
    try:
        r = subprocess.run([a.python, "-c", code], capture_output=True, text=True, timeout=120)
        info = json.loads(r.stdout.strip().splitlines()[-1])
    except Exception as exc:  # noqa: BLE001 - a description, not a requirement
        info = {"error": str(exc)}
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%h"], capture_output=True, text=True,
                             timeout=10).stdout.strip() or None
        # the device machine's copy keeps the git HEAD of a session's first call while its working tree is the
        # caller's: say that the tree differs from that commit rather than name a commit that is not what ran
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        if rev and dirty:
            rev += "+changes"
    except OSError:
        rev = None
    info.update({"host": platform.node(), "cpus": os.cpu_count(), "isaacd_rev": rev,
                 "load_avg": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M:%S %z")})
    return info


def table(res: dict[str, Any]) -> str:
    a = res["args"]
    L = [f"real Isaac Lab 3.0 ({res['environment'].get('isaaclab')}) {TASK}, runtime {a['runtime']}, "
         f"device {a['device']}, {a['num_envs']} envs, max_iterations {a['max_iterations']}, "
         f"save_interval {a['save_interval']}",
         f"  {res['environment'].get('python')} torch {res['environment'].get('torch')} gpu "
         f"{res['environment'].get('gpu')} isaacd {res['environment'].get('isaacd_rev')}"]
    s = res.get("startup") or {}
    L.append(f"(a) start-up: launch -> first iteration {s.get('launch_to_first_iteration_s')} s "
             f"(`isaacd run` -> first iteration {s.get('isaacd_run_to_first_iteration_s')} s)")
    L.append("(b) kill -9 of the trainer:")
    L.append(f"    {'#':>2} {'at it':>6} {'resumed from':>18} {'spare':>5} {'new pid':>8} {'1st it':>7} "
             f"{'TB step':>7} {'redone':>6}")
    for r in res.get("kills", []):
        frm = f"{r.get('resume_kind')} {r.get('resume_iteration')}"
        L.append(f"    {r['kill']:>2} {str(r.get('last_step_killed_run', r.get('status_iteration_at_kill'))):>6} "
                 f"{frm:>18} {'warm' if r.get('warm_spare') else 'cold':>5} {str(r.get('kill_to_new_pid_s')):>7}s "
                 f"{str(r.get('kill_to_first_iteration_s')):>6}s {str(r.get('kill_to_tensorboard_step_s')):>6}s "
                 f"{str(r.get('iterations_redone')):>6}")
    m = res.get("kill_medians") or {}
    L.append(f"    median: kill -> new pid {m.get('kill_to_new_pid_s')} s, -> first iteration "
             f"{m.get('kill_to_first_iteration_s')} s (TensorBoard step {m.get('kill_to_tensorboard_step_s')} s), "
             f"iterations redone {m.get('iterations_redone')}")
    st = res.get("stop") or {}
    L.append(f"(c) isaacd stop at iteration {st.get('status_iteration_at_stop')}: stopped in "
             f"{st.get('stop_to_stopped_s')} s, shim saved iteration {st.get('saved_iteration')} "
             f"(= last logged step: {st.get('saved_is_last_logged')}; saved after {st.get('stop_to_saved_s')} s), "
             f"exit code {st.get('exit_code')}")
    sa = res.get("start") or {}
    L.append(f"(d) isaacd start: resumed from {sa.get('resume_iteration')}, first iteration "
             f"{sa.get('start_to_first_iteration_s')} s, {sa.get('state')} at iteration {sa.get('final_iteration')} "
             f"in {sa.get('start_to_end_s')} s, restarts {sa.get('restarts')}")
    tb = res.get("tensorboard") or {}
    L.append(f"    TensorBoard across {len(tb.get('run_dirs', []))} run dirs: steps exactly 0..{a['max_iterations'] - 1}: "
             f"{tb.get('ok')} " + " ".join(f"[{d['first']}..{d['last']}]" for d in tb.get("run_dirs", [])))
    return "\n".join(L + table_footer(res))


def table_footer(res: dict[str, Any]) -> list[str]:
    """A table's last lines: the errors, then the verdict with the time, the load and the work dir."""
    la = res["environment"].get("load_avg") or [None]
    return [f"ERROR: {e}" for e in res.get("errors", [])] + [
        f"ok: {res.get('ok')}  ({res.get('elapsed_s')} s; load average {la[0]} at the start, "
        f"{(res.get('load_avg_end') or [None])[0]} at the end on {res['environment'].get('cpus')} CPUs; "
        f"work dir {res.get('workdir')})"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", required=True, help="the interpreter that has isaaclab (the job's launcher)")
    ap.add_argument("--device", default="cpu", help="cpu | cuda:0")
    ap.add_argument("--runtime", choices=["process", "podman"], default="process")
    ap.add_argument("--num-envs", type=int, default=16)
    ap.add_argument("--max-iterations", type=int, default=40)
    ap.add_argument("--save-interval", type=int, default=10)
    ap.add_argument("--kills", type=int, default=2)
    ap.add_argument("--kill-after", type=int, default=3, help="iterations trained after a (re)start before a kill/stop")
    ap.add_argument("--kill-at", choices=["mid", "step"], default="mid",
                    help="kill half an iteration after a step (mid) or as soon as a step is seen (step)")
    ap.add_argument("--asset-root", default=str(REPO / "tests/isaaclab3/asset_root"))
    ap.add_argument("--image", default="/:O", help="podman: an image, or a rootfs path (\"/:O\": overlay of /)")
    ap.add_argument("--gpus", default="", help="podman: the job's gpus (CDI nvidia.com/gpu=<each>), e.g. 0")
    ap.add_argument("--shm-size", default="2g")
    ap.add_argument("--volume", action="append", default=[], help="podman: one more volume HOST:CONTAINER[:ro]")
    ap.add_argument("--warp-cache", default="~/.cache/warp",
                    help="podman: the host's Warp kernel cache, mounted at the same path ('' for none)")
    ap.add_argument("--isaaclab-version", default=None, help='isaaclab_version (podman: "3.0" unless given)')
    ap.add_argument("--gpu-source", default=None, help="[gpu] source (default: nvml for cuda, none for cpu)")
    ap.add_argument("--no-spare", action="store_true", help="process runtime: no warm spare (cold restarts)")
    ap.add_argument("--spare-preload", action="append", default=[], help="module the spare imports ahead")
    ap.add_argument("--spare", choices=["auto", "booted", "imports", "off"], default=None,
                    help="process runtime: the job's spare setting (default: isaacd's, auto)")
    ap.add_argument("--throughput-iterations", type=int, default=0,
                    help="instead of kills, stop and start: measure Perf/total_fps over this many iterations")
    ap.add_argument("--throughput-from", type=int, default=90,
                    help="the first iteration measured (later if the spare is ready later), the same for every run")
    ap.add_argument("--boot-timeout", type=float, default=400.0, help="seconds a launch may take to its first iteration")
    ap.add_argument("--iteration-timeout", type=float, default=5.0, help="seconds one iteration may take")
    ap.add_argument("--spare-wait", type=float, default=120.0)
    ap.add_argument("--stop-wait", type=float, default=150.0)
    ap.add_argument("--deadline", type=float, default=0.0, help="stop waiting after this many seconds in all (0: none)")
    ap.add_argument("--workdir", default=None, help="where the run's temp dir goes (kept afterwards)")
    ap.add_argument("--out", required=True, help="results JSON")
    a = ap.parse_args(argv)
    a.python = launcher_path(a.python)

    b = Bench(a)
    b.begin(kills=[])
    phases: list[tuple[str, Callable[[], None]]] = [("startup", b.phase_startup)]
    if a.throughput_iterations:
        phases += [("throughput", b.phase_throughput)]
    else:
        phases += [(f"kill {k}", lambda k=k: b.phase_kill(k)) for k in range(1, a.kills + 1)]
        phases += [("stop", b.phase_stop), ("start", b.phase_start)]

    def body() -> None:
        for name, fn in phases:
            try:
                fn()
            except (Deadline, RuntimeError, OSError, StopIteration, KeyError) as exc:
                b.res["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
                b.log(f"{name} FAILED: {exc}")
                if isinstance(exc, Deadline) and time.time() >= b.deadline:
                    break
                if name == "startup" or (b.sup is not None and b.sup.poll() is not None):
                    break
            b.save()
        try:
            if not a.throughput_iterations:
                b.check_tensorboard()
        except Exception as exc:  # noqa: BLE001 - report, keep the figures
            b.res["errors"].append(f"tensorboard check: {type(exc).__name__}: {exc}")
        b.res["attempts"] = b.attempt_timelines()
        try:
            b.res["events"] = b.events()
        except Exception:  # noqa: BLE001
            pass
    return b.run(body, table)


if __name__ == "__main__":
    sys.exit(main())
