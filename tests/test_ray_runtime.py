"""runtime = "ray" on a real three-node Ray cluster on this machine (issue 12).

One head (no GPU: jobs never land there) and two workers with one logical GPU each (`--num-gpus 1`) and an
`isaacd/node` label, every node with its own temp dir, started by `ray start` like an operator would. Faults
enter through real processes only: the trainer is SIGKILLed by its pid, a node is lost by SIGKILLing its
raylet by pid. CI-sized: the cluster is started once for the module.
"""

from __future__ import annotations

import json
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from free_ports import free_ports
from helpers import builtin_job, wait_for, write_config

from isaacd.config.schema import parse_config

ray = pytest.importorskip("ray", reason="ray is not installed in this venv (scripts/install.sh installs it)")

BIN = Path(sys.executable).parent
FAST_HEALTH = {  # the GCS declares a node dead ~1.5 s after its raylet stops answering (default ~15-30 s)
    "RAY_health_check_period_ms": "500", "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_timeout_ms": "1000", "RAY_health_check_initial_delay_ms": "1000",
}


def _procs_under(*markers: str) -> list[int]:
    """Pids whose command line names one of `markers` (a node's temp dir, the head's address), plus all their
    descendants."""
    roots, children = [], {}
    for e in os.scandir("/proc"):
        if not e.name.isdigit():
            continue
        try:
            cmd = Path(e.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(e.path, "stat").read_text()
        except OSError:
            continue
        children.setdefault(int(stat[stat.rindex(")") + 2:].split()[1]), []).append(int(e.name))
        if any(m in cmd for m in markers):
            roots.append(int(e.name))
    mine, p = set(), os.getpid()  # never this process or its ancestors (a shell whose command names the dir)
    while p > 1:
        mine.add(p)
        try:
            st = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            break
        p = int(st[st.rindex(")") + 2:].split()[1])
    roots = [r for r in roots if r not in mine]
    out, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo.extend(children.get(p, []))
    return sorted(out)


def raylet_pid(node_dir: Path) -> int:
    for e in os.scandir("/proc"):
        if e.name.isdigit():
            try:
                cmd = Path(e.path, "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"/raylet") and any(str(node_dir).encode() in a for a in cmd):
                return int(e.name)
    raise AssertionError(f"no raylet under {node_dir}")


class Cluster:
    def __init__(self, root: Path):
        self.root = root
        self.port, self.client_server_port = free_ports(2)  # picked together: never the same port twice
        self.address = f"127.0.0.1:{self.port}"
        self.dirs = {n: root / n for n in ("head", "w1", "w2")}
        self.env = {**os.environ, **FAST_HEALTH, "RAY_USAGE_STATS_ENABLED": "0",
                    "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}

    def health_file(self, name: str) -> Path:
        """Where this node's `isaacd agent` writes unhealthy GPUs: its own file (all nodes share one filesystem
        here), named to the node's Ray workers through ISAACD_AGENT_HEALTH_FILE in its `ray start` environment."""
        return self.dirs[name] / "agent-health.json"

    def _ray_start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        d = self.dirs[name]
        d.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen([str(BIN / "ray"), "start", "--temp-dir", str(d), "--labels", f"isaacd/node={name}",
                                 "--disable-usage-stats", *args],
                                env={**self.env, "ISAACD_AGENT_HEALTH_FILE": str(self.health_file(name))},
                                stdout=open(d / "start.log", "wb"), stderr=subprocess.STDOUT)

    def ensure_workers(self) -> None:
        """Bring back a worker an earlier test lost (its raylet SIGKILLed): what is left of it goes, then a fresh
        `ray start` under the same name and label (Ray gives it a new node id)."""
        for w in ("w1", "w2"):
            try:
                raylet_pid(self.dirs[w])
                continue
            except AssertionError:
                pass
            for pid in _procs_under(str(self.dirs[w])):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            shutil.rmtree(self.dirs[w], ignore_errors=True)
            p = self._ray_start(w, "--address", self.address, "--num-cpus", "2", "--num-gpus", "1")
            assert p.wait(120) == 0, (self.dirs[w] / "start.log").read_text()[-3000:]

    def start(self) -> "Cluster":
        head = self._ray_start("head", "--head", "--port", str(self.port), "--num-cpus", "1", "--num-gpus", "0",
                               "--include-dashboard", "false", "--ray-client-server-port", str(self.client_server_port))
        assert head.wait(120) == 0, (self.dirs["head"] / "start.log").read_text()[-3000:]
        workers = [self._ray_start(w, "--address", self.address, "--num-cpus", "2", "--num-gpus", "1")
                   for w in ("w1", "w2")]
        for w, p in zip(("w1", "w2"), workers):
            assert p.wait(120) == 0, (self.dirs[w] / "start.log").read_text()[-3000:]
        return self

    def stop(self) -> None:
        for name in ("w1", "w2", "head"):
            # the head's client server names only the address
            for pid in _procs_under(str(self.dirs[name]), *([f":{self.port} "] if name == "head" else [])):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


@pytest.fixture(scope="module")
def cluster():
    # short: Ray's Unix sockets live under the temp dir (AF_UNIX paths are at most 107 bytes)
    root = Path(tempfile.mkdtemp(prefix="isaacd-ray-", dir="/tmp"))
    c = Cluster(root)
    try:
        yield c.start()
    finally:
        c.stop()
        shutil.rmtree(root, ignore_errors=True)


def _leave_the_cluster_free(sup, name: str = "cp") -> None:  # noqa: ANN001
    """Ray jobs outlive their supervisor (the next one adopts them): stop the job so its actor and GPU are
    released before the next test places one."""
    try:
        sup.cli("stop", name, check=False)
        wait_for(lambda: sup.job(name)["state"] in ("stopped", "failed", "completed"), 30, what="the job stopped")
    except Exception as exc:  # noqa: BLE001 - a failed test's cluster: say so, the next test will tell more
        print(f"could not stop the Ray job: {exc}")


@pytest.fixture
def ray_sup(cluster, tmp_path, supervisor_factory):
    """A supervisor with one Ray job on a cluster with both workers up; the job is stopped at the end."""
    cluster.ensure_workers()  # an earlier test may have lost one
    sup = supervisor_factory(_config(tmp_path, cluster))
    yield sup
    _leave_the_cluster_free(sup)


def _config(tmp_path: Path, cluster: Cluster) -> Path:
    job = builtin_job("cp", runtime="ray", num_envs=32, max_iterations=100000, save_interval=5, stop_timeout=5.0,
                      ray={"num_gpus": 1, "num_cpus": 1},
                      restart={"backoff_initial": 0.2, "backoff_max": 1.0})
    return write_config(tmp_path, job, extra=f'\n[ray]\naddress = "{cluster.address}"\n')


def test_ray_job_resumes_in_place_after_kill_and_on_another_node_after_node_loss(cluster, tmp_path, ray_sup):
    sup = ray_sup
    job = wait_for(lambda: (j := sup.job("cp"))["state"] == "running" and j["node"] and (j["iteration"] or 0) >= 3
                   and j, 90, what="the job training on a worker node")
    first = job["node"]
    assert first in ("w1", "w2"), job  # the head has no GPU
    assert "ray@" + first in sup.cli("status").stdout

    # kill -9 of the trainer (on its node, by pid): resumed in place, from a checkpoint
    os.kill(job["pid"], signal.SIGKILL)
    again = wait_for(lambda: (j := sup.job("cp"))["restarts"] == 1 and j["state"] == "running"
                     and j["pid"] not in (None, job["pid"]) and j, 60, what="the restart after kill -9")
    assert again["node"] == first, again
    assert again["restarts_by_reason"] == {"signal": 1}
    assert again["resume_from"] is not None

    # the node's raylet SIGKILLed: the job resumes on the other worker from its newest checkpoint
    # a newer model_N.pt of rsl_rl's own on the first node: the trainer on a lost node may run on and rotate its shim
    # snapshots, so a resume after the loss never names one of those (attempt/setting.py lost_trainer_run_dirs)
    def newest_model() -> int:
        run_dir = Path(((sup.job("cp")["checkpoint"] or {}).get("path")) or ".").parent
        return max((int(p.stem.split("_")[1]) for p in run_dir.glob("model_*.pt")), default=-1)
    before = wait_for(lambda: (n := newest_model()) > again["resume_from"]["iteration"] and n, 60,
                      what="a newer model checkpoint on the first node")
    os.kill(raylet_pid(cluster.dirs[first]), signal.SIGKILL)
    lost_at = time.monotonic()
    moved = wait_for(lambda: (j := sup.job("cp"))["restarts"] == 2 and j["state"] == "running" and j["node"]
                     and j, 60, what="the job running on another node")
    took = time.monotonic() - lost_at
    other = "w2" if first == "w1" else "w1"
    assert moved["node"] == other, moved
    assert moved["restarts_by_reason"] == {"signal": 1, "node_lost": 1}, moved
    assert moved["last_restart_reason"].startswith(f"node lost: {first}"), moved
    assert moved["resume_from"]["iteration"] >= before, (moved["resume_from"], before)
    assert Path(moved["resume_from"]["path"]).name.startswith("model_"), moved["resume_from"]
    print(f"node lost -> training on {other} in {took:.1f} s")

    exits = [e for e in sup.events("cp") if e["event"] == "exited"]
    assert exits[-1].get("node_lost") is True and "node lost" in exits[-1]["description"], exits[-1]

    # the lost node is cordoned (persisted) until an operator clears it
    nodes = json.loads(sup.cli("nodes", "--json").stdout)
    by_name = {n["name"]: n for n in nodes["nodes"]}
    assert by_name[first]["cordoned"] and "node lost" in by_name[first]["cordoned"]["reason"]
    assert by_name[other]["jobs"] == ["cp"] and not by_name[other]["cordoned"]
    assert "cordoned" in sup.cli("nodes").stdout
    assert json.loads((tmp_path / "state" / "ray" / "cordoned.json").read_text()).keys() == {first}
    assert "uncordoned" in sup.cli("uncordon", first).stdout
    res = sup.cli("uncordon", first, check=False)
    assert res.returncode == 1 and "not cordoned" in res.stderr

    # metrics: the current attempt's gauges carry the node
    from isaacd.metrics import build_registry
    from prometheus_client import generate_latest

    text = generate_latest(build_registry(lambda: sup.status(), None, process_metrics=False)).decode()
    assert f'isaacd_job_info{{job="cp",node="{other}",runtime="ray"}} 1.0' in text
    assert 'isaacd_job_restarts_total{job="cp",reason="node_lost"} 1.0' in text


def test_actor_refuses_a_log_root_that_is_not_shared(tmp_path):
    """The storage check, where it runs (the actor's code on a node), without a cluster."""
    from isaacd.runtimes.ray_actor import TrainerActor

    a = TrainerActor("cp", "t")
    root = tmp_path / "logs"
    root.mkdir()
    res = a.launch(["true"], {}, str(tmp_path / "wd"), str(root), str(root / ".isaacd-storage-check"), "n1",
                   str(tmp_path / "own"))
    assert not res["ok"] and res["kind"] == "storage" and "not shared with this node" in res["error"], res
    (root / ".isaacd-storage-check").write_text("other\n")
    res = a.launch(["true"], {}, str(tmp_path / "wd"), str(root), str(root / ".isaacd-storage-check"), "n1",
                   str(tmp_path / "own"))
    assert not res["ok"] and "another volume" in res["error"], res
    (root / ".isaacd-storage-check").write_text("n1\n")
    res = a.launch(["sh", "-c", "echo hello"], {}, str(tmp_path / "wd"), str(root),
                   str(root / ".isaacd-storage-check"), "n1", str(tmp_path / "own"))
    assert res["ok"], res
    wait_for(lambda: a.status(0, 0)["state"] == "exited", 10, what="the trainer's exit")
    st = a.status(0, 0)
    assert st["code"] == 0 and st["out"] == b"hello\n" and not st["more"]
    assert (tmp_path / "wd" / "logs").resolve() == root


def test_an_attempt_taken_for_lost_stops_itself_once_another_owns_the_job(tmp_path):
    """Split brain: a node cut off from the head keeps its trainer running while the head, taking it for lost,
    starts the next attempt elsewhere and writes that attempt's token into the job's owner file in the shared
    log_root. The old actor (its real code, on a real trainer process) sees another token and stops its trainer;
    an unreadable owner file (the shared storage away) stops nothing."""
    from isaacd.runtimes.ray import owner_file
    from isaacd.runtimes.ray_actor import FENCE_INTERVAL, TrainerActor

    root = tmp_path / "logs"
    root.mkdir()
    (root / ".isaacd-storage-check").write_text("n1\n")
    job = parse_config(f'[ray]\naddress = "auto"\n[[jobs]]\nname = "cp"\nruntime = "ray"\nlog_root = "{root}"\n', "t",
                       tmp_path).jobs[0]
    owner = owner_file(job)
    owner.write_text("t1\n")
    a = TrainerActor("cp", "t1")
    res = a.launch(["sleep", "60"], {}, str(tmp_path / "wd"), str(root), str(root / ".isaacd-storage-check"), "n1",
                   str(tmp_path / "own"), None, str(owner))
    assert res["ok"], res
    owner.unlink()  # the shared storage away for a moment: no proof, keep training
    time.sleep(FENCE_INTERVAL * 1.5)
    assert a.status(0, 0)["state"] == "running" and a.fenced is None
    owner.write_text("t1\n")
    time.sleep(FENCE_INTERVAL * 1.5)
    assert a.status(0, 0)["state"] == "running"  # still this attempt's
    owner.write_text("t2-the-next-attempt\n")
    wait_for(lambda: a.status(0, 0)["state"] == "exited", FENCE_INTERVAL * 3, what="the fenced trainer stopped")
    st = a.status(0, 0)
    assert st["signal"] == signal.SIGKILL and "t2-the-next" in st["fenced"] and "stopped itself" in st["fenced"]


def test_agent_writes_reset_class_xids_to_the_node_health_file(tmp_path):
    """`isaacd agent`'s side of the XID path: a scripted GPU reports XID 79 → the node's health file names it;
    the actor on that node reads it (and the supervisor then cordons the node)."""
    from isaacd.agent import Agent
    from isaacd.config.schema import parse_config
    from isaacd.runtimes.ray_actor import TrainerActor

    script = tmp_path / "gpus.json"
    script.write_text(json.dumps({"gpus": 2, "events": [{"t": 0, "gpu": 1, "xid": 79}]}))
    cfg = parse_config(f'[metrics]\nenabled = false\n[gpu]\nsource = "scripted"\nscript = "{script}"\n'
                       f'sample_interval = 0.05\n[ray]\nhealth_file = "health.json"\n', "t", tmp_path)
    agent = Agent(cfg, node="w1").start()
    try:
        got = wait_for(lambda: agent.check(), 10, what="the XID marking GPU 1 unhealthy")
    finally:
        agent.stop()
    assert set(got) == {"1"} and "XID 79" in got["1"]
    doc = json.loads((tmp_path / "health.json").read_text())
    assert doc["node"] == "w1" and set(doc["unhealthy"]) == {"1"}
    actor = TrainerActor("cp", "t", str(tmp_path / "health.json"))
    actor.gpu_ids = ["1"]
    assert actor.unhealthy_gpus() == [f"1 ({got['1']})"]
    actor.gpu_ids = ["0"]
    assert actor.unhealthy_gpus() == []


def test_a_reset_class_xid_on_the_jobs_node_moves_the_job_and_cordons_that_node(cluster, tmp_path, ray_sup):
    """The issue's XID path end to end: `isaacd agent` on the job's node, on a scripted GPU, sees XID 79 (a GPU
    reset is needed); the trainer's actor on that node reads the agent's health file, the trainer is stopped, the
    attempt ends as node_lost, the job resumes on the other worker and the node stays cordoned."""
    sup = ray_sup
    job = wait_for(lambda: (j := sup.job("cp"))["state"] == "running" and j["node"] and j["checkpoint"] and j, 90,
                   what="the job training with a checkpoint on a worker node")
    node = job["node"]
    other = "w2" if node == "w1" else "w1"
    script = tmp_path / "gpu.json"  # the node's one GPU reports XID 79 a second after the agent starts
    script.write_text(json.dumps({"gpus": 1, "events": [{"t": 1, "gpu": 0, "xid": 79}]}))
    agent_cfg = tmp_path / "agent.toml"
    agent_cfg.write_text(f'[metrics]\nenabled = false\n[gpu]\nsource = "scripted"\nscript = "{script}"\n'
                         'sample_interval = 0.1\n')
    env = {**os.environ, "ISAACD_AGENT_HEALTH_FILE": str(cluster.health_file(node))}
    agent = subprocess.Popen([str(BIN / "isaacd"), "agent", "--config", str(agent_cfg), "--node", node], env=env,
                             stdout=open(tmp_path / "agent.log", "wb"), stderr=subprocess.STDOUT)
    try:
        moved = wait_for(lambda: (j := sup.job("cp"))["restarts"] == 1 and j["state"] == "running"
                         and j["node"] and j, 90, what="the job running again after the XID")
    finally:
        agent.terminate()
        agent.wait(10)
    assert moved["node"] == other, moved
    assert moved["restarts_by_reason"] == {"node_lost": 1}, moved
    assert moved["last_restart_reason"].startswith("node lost") and "XID 79" in moved["last_restart_reason"], moved
    assert moved["resume_from"] is not None and moved["resume_from"]["iteration"] >= job["checkpoint"]["iteration"]
    health = json.loads(cluster.health_file(node).read_text())
    assert health["node"] == node and "XID 79" in health["unhealthy"]["0"]
    nodes = {n["name"]: n for n in json.loads(sup.cli("nodes", "--json").stdout)["nodes"]}
    assert nodes[node]["cordoned"] and "GPU unhealthy" in nodes[node]["cordoned"]["reason"], nodes[node]
    assert "XID 79" in nodes[node]["cordoned"]["reason"]
    assert not nodes[other]["cordoned"] and nodes[other]["jobs"] == ["cp"]


def _podman_runs_containers() -> str | None:
    try:
        r = subprocess.run(["podman", "run", "--rm", "--rootfs", "/:O", "true"], capture_output=True, text=True,
                           timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["podman run failed"])[-1]


@pytest.mark.podman
def test_a_containerised_job_runs_in_podman_on_its_node(cluster, tmp_path, supervisor_factory):
    """[jobs.ray] container = true: the actor on the node runs `podman run` of the job's container (here the
    host's rootfs as an overlay image with this venv's python, as the podman runtime's e2e does); a killed
    container resumes in place from a checkpoint, and a stop reaches the shim inside (it saves, exit 0) through
    the side channel mounted from the node's work dir. Nothing is left behind."""
    why = _podman_runs_containers()
    if why is not None:
        pytest.skip(f"podman cannot run containers here: {why}")
    cluster.ensure_workers()
    name = f"rc{uuid.uuid4().hex[:6]}"
    job = builtin_job(name, runtime="ray", launcher=[str(BIN / "python")], num_envs=32, max_iterations=100000,
                      save_interval=2, stop_timeout=10.0, extra_args=["agent.num_steps_per_env=8"],
                      ray={"num_gpus": 0, "num_cpus": 1, "nodes": ["w1", "w2"], "container": True},
                      container={"image": "/:O", "shm_size": "256m"},
                      restart={"backoff_initial": 0.2, "backoff_max": 1.0})
    sup = supervisor_factory(write_config(tmp_path, job, extra=f'\n[ray]\naddress = "{cluster.address}"\n'))

    def containers(*flags: str) -> list[str]:
        return subprocess.run(["podman", "ps", "-q", *flags, "--filter", f"label=isaacd.job={name}"],
                              capture_output=True, text=True).stdout.split()

    try:
        j = wait_for(lambda: (x := sup.job(name))["state"] == "running" and x["node"] and x["checkpoint"]
                     and x, 180, what="the containerised job training with a checkpoint")
        node = j["node"]
        assert node in ("w1", "w2") and len(containers()) == 1
        first = [e for e in sup.events(name) if e["event"] == "started"][0]
        assert "/opt/isaacd/isaacd_shim.py" in first["argv"]  # the container's command runs the mounted shim
        subprocess.run(["podman", "kill", f"isaaclab-job-{name}"], check=True, capture_output=True)
        again = wait_for(lambda: (x := sup.job(name))["restarts"] == 1 and x["state"] == "running" and x, 120,
                         what="the resume after the container was killed")
        assert again["node"] == node and again["resume_from"] is not None, again
        assert again["restarts_by_reason"] == {"signal": 1}, again
        wait_for(lambda: (sup.job(name)["iteration"] or 0) > again["resume_from"]["iteration"], 120,
                 what="training again in the new container")
        sup.cli("stop", name)
        wait_for(lambda: sup.job(name)["state"] == "stopped", 60, what="the graceful stop")
        ex = [e for e in sup.events(name) if e["event"] == "exited"][-1]
        assert ex["code"] == 0, ex  # the shim in the container caught SIGINT and saved
        saved = [e for e in sup.events(name) if e["event"] == "trainer_saved_on_stop"]
        assert saved and saved[-1]["checkpoint"], saved
        wait_for(lambda: not containers("-a"), 30, what="no container left")
    finally:
        _leave_the_cluster_free(sup, name)
        subprocess.run(["podman", "rm", "-f", "-t", "0", f"isaaclab-job-{name}"], capture_output=True)


def _start_node_without(cluster: Cluster, name: str, hidden: Path) -> None:
    """A worker whose view of `hidden` is its own empty tmpfs: `ray start` in a private mount namespace (its raylet
    and every actor and trainer it starts stay there). For the supervisor's files at that path, it is a node
    without the shared volume, exactly as on a real cluster."""
    d = cluster.dirs[name] = cluster.root / name
    d.mkdir(parents=True, exist_ok=True)
    hidden.mkdir(parents=True, exist_ok=True)
    script = (f'mount -t tmpfs tmpfs "{hidden}" && exec "{BIN / "ray"}" start --address {cluster.address} '
              f'--temp-dir "{d}" --labels isaacd/node={name} --num-cpus 1 --num-gpus 0 --disable-usage-stats')
    p = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], env=cluster.env,
                         stdout=open(d / "start.log", "wb"), stderr=subprocess.STDOUT)
    if p.wait(120) != 0:
        text = (d / "start.log").read_text()
        if "mount" in text or "unshare" in text:
            pytest.skip(f"cannot make a private mount namespace here (needs root): {text.strip()[-300:]}")
        raise AssertionError(text[-3000:])


def test_a_node_without_the_shared_log_root_trains_and_resumes_from_the_bucket(cluster, tmp_path, supervisor_factory):
    """Issue 22: with [jobs.backup] a job runs on a node that does not see its log_root (no storage marker there):
    the node uploads the run's checkpoints to the bucket, and after a kill -9 the next attempt on that node resumes
    from the bucket's newest checkpoint, which the supervisor verified and the node fetched."""
    import json as _json

    cluster.ensure_workers()
    logs, bucket = tmp_path / "logs", tmp_path / "bucket"
    _start_node_without(cluster, "w3", logs)
    job = builtin_job("bk", runtime="ray", num_envs=32, max_iterations=100000, save_interval=2, stop_timeout=5.0,
                      extra_args=["agent.num_steps_per_env=8"], ray={"num_gpus": 0, "num_cpus": 1, "nodes": ["w3"]},
                      restart={"backoff_initial": 0.2, "backoff_max": 1.0}, backup={"url": f"file://{bucket}"})
    sup = supervisor_factory(write_config(tmp_path, job, extra=f'\n[ray]\naddress = "{cluster.address}"\n'))

    def manifest() -> list[dict]:
        try:
            return _json.loads((bucket / "bk" / "manifest.json").read_text())["checkpoints"]
        except (OSError, ValueError):
            return []

    try:
        wait_for(lambda: sup.job("bk")["node"] == "w3" and any(e["iteration"] >= 4 for e in manifest()), 120,
                 what="checkpoints uploaded from the node")
        assert not list(logs.rglob("model_*.pt")), "the supervisor's log_root got no checkpoint: not shared"
        first = sup.job("bk")
        assert first["restarts"] == 0 and first["state"] in ("starting", "running"), first
        os.kill(first["pid"], signal.SIGKILL)  # the trainer, on the node, by pid
        again = wait_for(lambda: (j := sup.job("bk"))["restarts"] == 1 and j["pid"] not in (None, first["pid"])
                         and j, 60, what="the attempt after kill -9")
        assert again["node"] == "w3"
        events = sup.events("bk")
        restored = [e for e in events if e["event"] == "backup_restored"]
        started = [e for e in events if e["event"] == "started"]
        assert restored and started[-1]["resume_from"]["iteration"] == restored[-1]["iteration"] >= 4, events
        resumed = restored[-1]["iteration"]
        # the node fetched it and trains on from it: a newer checkpoint of a new run reaches the bucket
        wait_for(lambda: any(e["iteration"] > resumed and e["run"] != restored[-1]["key"].split("/")[0]
                             for e in manifest()), 120, what="the resumed run's checkpoints in the bucket")
    finally:
        _leave_the_cluster_free(sup, "bk")
        for pid in _procs_under(str(cluster.dirs["w3"])):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
