"""`isaacd agent`: the GPU sampler and /metrics on a Ray node, no jobs, no supervisor.

Runs on every node of a cluster that takes `runtime = "ray"` jobs (units/isaacd-agent.service). It exports
the same GPU series as the supervisor (Prometheus scrapes every node; label the target with the node's name
in the scrape config, see README).

How the head learns of a GPU's reset-class XID on a node (kept simple on purpose): the agent marks the GPU
unhealthy and writes the node's unhealthy GPUs to a node-local file ([ray] health_file, default
/run/isaacd/agent-health.json) as `{"node": ..., "unhealthy": {"<gpu index>": "XID 79 (reset)"}}`. The
Ray actor that runs a job's trainer on that node reads the file on every status call: a GPU the job holds
that turned unhealthy stops the trainer, the attempt ends as `node_lost`, and the supervisor cordons the
node until `isaacd uncordon`. No new network path, no head-side scraping: the file is read where it is.
Clearing the file (after a GPU reset or reboot) is the agent's job: it starts with an empty one.
A node whose agent writes elsewhere says so with ISAACD_AGENT_HEALTH_FILE in the environment of its `ray start`
(Ray's workers, so the trainer's actor, inherit it) and of its agent: that path wins over [ray] health_file.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

from . import __version__
from .config.schema import Config
from .daemon_log import log
from .runtimes.ray_actor import node_health_file
from .status.types import Status, SupervisorInfo

UNHEALTHY_CLASSES = ("reset", "reboot")


def write_health(path: Path, node: str, unhealthy: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"node": node, "unhealthy": unhealthy, "updated": time.time()}))
    os.replace(tmp, path)


class Agent:
    def __init__(self, cfg: Config, node: str | None = None, listen: str | None = None,
                 health_file: str | Path | None = None):
        from .gpu import GpuSampler

        self.cfg = cfg
        self.node = node or socket.gethostname()
        self.listen = listen or cfg.metrics.listen
        self.health_file = Path(health_file) if health_file else node_health_file(
            cfg.ray.health_file if cfg.ray is not None else None)
        self.sampler = GpuSampler.from_config(cfg.gpu)
        self.sampler.gpus_optional = True
        self.started_at = time.time()
        self.server: Any = None
        self._stop = threading.Event()
        self._written: dict[str, str] | None = None

    def status(self) -> Status:
        """What /metrics reads of this agent: no jobs (they are the head's), its version and uptime."""
        return Status(supervisor=SupervisorInfo(version=__version__, pid=os.getpid(), started_at=self.started_at,
                                                uptime_seconds=time.time() - self.started_at))

    def start(self) -> "Agent":
        from .metrics import build_registry, serve

        self.sampler.start()
        self.sampler.wait_ready(5.0)
        write_health(self.health_file, self.node, {})  # a fresh start: whatever was marked before is history
        self._written = {}
        if self.cfg.metrics.enabled:
            self.server = serve(self.listen, self.cfg.metrics.path, build_registry(self.status, self.sampler))
        log.info("agent_started", node=self.node, listen=self.listen if self.server else None,
                 health_file=str(self.health_file))
        return self

    def check(self) -> dict[str, str]:
        """Mark GPUs with a reset-class XID unhealthy; write the health file when the set changed."""
        from .gpu.types import xid_class

        snap = self.sampler.snapshot()
        for (gpu, xid), _count in sorted(snap.xids.items()):
            if xid_class(xid) in UNHEALTHY_CLASSES and gpu not in snap.unhealthy:
                self.sampler.mark_unhealthy(gpu, f"XID {xid} ({xid_class(xid)})")
        unhealthy = {str(k): str(v) for k, v in self.sampler.snapshot().unhealthy.items()}
        if unhealthy != self._written:
            try:
                write_health(self.health_file, self.node, unhealthy)
                self._written = unhealthy
                log.warning("agent_gpu_health", node=self.node, unhealthy=unhealthy, file=str(self.health_file))
            except OSError as exc:
                log.error("agent_health_not_written", path=str(self.health_file), error=str(exc))
        return unhealthy

    def run(self, interval: float = 1.0) -> None:
        while not self._stop.wait(interval):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - one bad pass must not end the agent
                log.exception("agent_check_failed")

    def stop(self) -> None:
        self._stop.set()
        if self.server is not None:
            self.server.close()
        self.sampler.stop()


def run_agent(cfg: Config, node: str | None = None, listen: str | None = None,
              health_file: str | None = None) -> int:
    from .daemon_log import configure_logging

    configure_logging(cfg.supervisor.log_level, cfg.supervisor.log_format)
    agent = Agent(cfg, node, listen, health_file)
    try:
        agent.start()
    except OSError as exc:
        print(f"isaacd agent: cannot listen on {agent.listen}: {exc.strerror or exc}; set another port with "
              "--listen or [metrics] listen")
        return 2
    signal.signal(signal.SIGTERM, lambda *_: agent._stop.set())
    signal.signal(signal.SIGINT, lambda *_: agent._stop.set())
    try:
        agent.run()
    finally:
        agent.stop()
    return 0
