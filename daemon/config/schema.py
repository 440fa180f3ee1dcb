"""Host config: one TOML file parsed into typed, validated models.

Every error names the file, the key path and what is allowed, so a bad edit can be fixed
without reading this module. Parsing never touches running jobs: the supervisor only swaps
in a config that validated completely.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from . import errors as type_errors
from .backup import BackupConfig
from .eval import EvalConfig, refusal as eval_refusal
from ..gpu.assign import device_outside_gpus, gpu_conflicts
from .jobs_dir import DropIn, DropInError, UserLookups, open_to_others, owned, read_drop_ins, with_paths_under
from .locate import DEFAULT_SOCKET, EMBEDDED_DEFAULT_NAME
from .notify import NotifyConfig
from .access import NAME_RE, AccessConfig
from .queue import QueueConfig
from .sizes import Size, size_bytes
from .watchdogs import WatchdogsConfig

JOB_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
DEVICE_RE = re.compile(r"^(cpu|cuda(:\d+)?)$")


class _Model(BaseModel):
    # Unknown keys are typos until proven otherwise; strict so "10" is not silently 10.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


PositiveSeconds = Annotated[float, Field(gt=0)]


class SupervisorConfig(_Model):
    state_dir: Path = Path("/var/lib/isaacd")
    control_socket: Path = DEFAULT_SOCKET
    socket_mode: str = "0600"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["auto", "json", "console"] = "auto"
    tick_interval: Annotated[float, Field(gt=0, le=5)] = 0.2
    # a drop-in directory of job files, one [[jobs]] each (`isaacd submit` writes there): jobs without editing this
    # file (issue 31). Relative to this file's directory.
    jobs_dir: Path | None = None
    # many people on one server (issue 32, docs/security.md): the control socket's group (mode 0660 then), whose
    # members use isaacd with their own identity (from the kernel, SO_PEERCRED); and the group that may do anything
    socket_group: str | None = None
    admin_group: str | None = None

    @field_validator("socket_mode")
    @classmethod
    def _octal_mode(cls, v: str) -> str:
        if not re.fullmatch(r"0?[0-7]{3}", v):
            raise ValueError("must be an octal file mode string such as \"0600\"")
        if int(v, 8) & 0o007:
            raise ValueError("must not grant access to 'other' (last digit 0): anyone could stop your jobs")
        return v

    @field_validator("state_dir", "control_socket", "jobs_dir", mode="before")
    @classmethod
    def _path(cls, v: Any) -> Any:
        return Path(v) if isinstance(v, str) else v


class MetricsConfig(_Model):
    enabled: bool = True
    listen: str = "127.0.0.1:9835"
    path: str = "/metrics"

    @field_validator("listen")
    @classmethod
    def _host_port(cls, v: str) -> str:
        m = re.fullmatch(r"(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})", v)
        if not m or not 0 < int(m.group(2)) < 65536:
            raise ValueError('must be "host:port", e.g. "127.0.0.1:9835" or "[::1]:9835"')
        return v

    @field_validator("path")
    @classmethod
    def _abs_path(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError('must start with "/", e.g. "/metrics"')
        return v


class GpuConfig(_Model):
    source: Literal["nvml", "scripted", "none"] = "nvml"
    script: Path | None = None
    sample_interval: Annotated[float, Field(gt=0, le=60)] = 1.0
    slow_interval: Annotated[float, Field(gt=0, le=3600)] = 10.0

    @field_validator("script", mode="before")
    @classmethod
    def _path(cls, v: Any) -> Any:
        return Path(v) if isinstance(v, str) else v

    @model_validator(mode="after")
    def _script_needed(self) -> "GpuConfig":
        if self.source == "scripted" and self.script is None:
            raise ValueError('source = "scripted" needs script = "/path/to/timeline.json"')
        return self


class RestartPolicy(_Model):
    max_restarts: Annotated[int, Field(ge=0)] = 10
    window: PositiveSeconds = 3600.0
    backoff_initial: Annotated[float, Field(ge=0)] = 1.0
    backoff_max: Annotated[float, Field(ge=0)] = 300.0
    backoff_factor: Annotated[float, Field(ge=1)] = 2.0
    # An attempt that ran this long resets the backoff ladder: a crash once a day is not a loop.
    reset_after: PositiveSeconds = 600.0
    # The first restart after a crash goes at once (every second counts on a rented GPU); the backoff ladder
    # starts at the second consecutive quick failure. max_restarts / window bound loops either way.
    first_restart_immediate: bool = True

    @model_validator(mode="after")
    def _cap(self) -> "RestartPolicy":
        if self.backoff_max < self.backoff_initial:
            raise ValueError("backoff_max must be >= backoff_initial")
        return self


class LaunchDeadlines(_Model):
    """[jobs.launch]: how long each wait of a launch may last (issue 28; docs/launch-deadlines.md). A wait that runs
    past its bound ends the attempt at once: the trainer (its process group, container or unit) is killed and the
    job starts cold, with no backoff and outside the crash-loop window; the event says which wait and how long."""

    # a parked spare acknowledges the go line (its `spare_go`) within milliseconds (measured: docs/launch-deadlines.md)
    spare_ack_timeout: PositiveSeconds = 2.0
    # then its first training step within max(spare_first_step_min, spare_first_step_iterations x the job's last
    # measured iteration time); an imports-only spare, which still builds the environment, gets twice the job's
    # last measured cold start-up on top (none measured yet: no first-step deadline, the no_progress watchdog's)
    spare_first_step_iterations: PositiveSeconds = 10.0
    spare_first_step_min: PositiveSeconds = 60.0
    # the runtime reports the trainer's process (a podman/systemd container created and started on its worker)
    runtime_start_timeout: PositiveSeconds = 300.0
    # a spare that has not said `spare_ready` this long after its start is killed and started again later (its
    # boot is off the launch path, yet a spare stuck in its boot would leave the job without one for good)
    spare_boot_timeout: PositiveSeconds = 1800.0


class OomPolicy(_Model):
    """[jobs.oom]: what a CUDA out-of-memory exit before the first iteration (start-up) does.

    Default: retried once (a neighbour may have freed the GPU), then the job fails saying why. With step_down the
    job is relaunched from its checkpoint with num_envs x step_down, down to min_num_envs. An out-of-memory after
    training ran is restarted like any crash either way."""

    step_down: float | None = None
    min_num_envs: Annotated[int, Field(gt=0)] | None = None

    @field_validator("step_down")
    @classmethod
    def _fraction(cls, v: float | None) -> float | None:
        if v is not None and not 0 < v < 1:
            raise ValueError(f"must be between 0 and 1, the factor num_envs is multiplied by at each step "
                             f"(0.5 halves it); got {v}")
        return v

    @model_validator(mode="after")
    def _both(self) -> "OomPolicy":
        if self.step_down is not None and self.min_num_envs is None:
            raise ValueError("step_down needs min_num_envs, the fewest environments worth training with "
                             "(e.g. min_num_envs = 256)")
        if self.min_num_envs is not None and self.step_down is None:
            raise ValueError("min_num_envs is the floor of step_down; add step_down (e.g. step_down = 0.5) or "
                             "remove min_num_envs")
        return self


class ContainerConfig(_Model):
    """Used by the podman and systemd runtimes."""

    image: str = "localhost/isaacd-builtin:latest"
    shm_size: str = "8g"
    volumes: list[str] = []
    ports: list[str] = []
    environment: dict[str, str] = {}
    user: str | None = None


RAY_LABEL_KEY_RE = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


class RayConfig(_Model):
    """[ray]: the Ray cluster jobs with runtime = "ray" are placed on (see README "From one host to several")."""

    # "auto" (the cluster this host's `ray start` joined), "host:port" of the head's GCS, or "ray://host:10001"
    address: str = "auto"
    namespace: str = "isaacd"
    # how long the supervisor waits for the cluster at start (adoption); ticks never wait for Ray
    connect_timeout: Annotated[float, Field(gt=0, le=600)] = 30.0
    # the node label that names a node in `isaacd nodes`, status and metrics (else its hostname)
    node_label: str = "isaacd/node"
    # where `isaacd agent` on each node writes the node's GPU health (reset-class XIDs); the trainer's actor
    # reads it on its node: a GPU reported unhealthy there stops the job, and the node is avoided (cordoned)
    health_file: Path = Path("/run/isaacd/agent-health.json")

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        if v != "auto" and not re.fullmatch(r"(ray://)?[A-Za-z0-9_.\-\[\]:]+:\d{1,5}", v):
            raise ValueError('must be "auto", "host:port" of the Ray head (GCS, default port 6379) or '
                             '"ray://host:10001"')
        return v

    @field_validator("health_file", mode="before")
    @classmethod
    def _path(cls, v: Any) -> Any:
        return Path(v) if isinstance(v, str) else v


class RayJobConfig(_Model):
    """[jobs.ray]: what one attempt of a runtime = "ray" job asks the cluster for."""

    num_gpus: Annotated[float, Field(ge=0)] = 1.0
    num_cpus: Annotated[float, Field(ge=0)] = 1.0
    memory: Size | None = None  # "32GiB": Ray's memory resource (scheduling only, not a cgroup limit)
    resources: dict[str, Annotated[float, Field(ge=0)]] = {}  # custom Ray resources, e.g. {"A100" = 1}
    labels: dict[str, str] = {}  # the node must carry these labels (`ray start --labels k=v`)
    nodes: list[str] = []  # only these nodes (by name, see [ray] node_label); [] = any node that fits
    # true: the trainer runs in a Podman container on its node (`podman run`, [jobs.container]: image, volumes,
    # ...; the GPUs Ray gave the attempt by CDI), as an Isaac Lab image does. false: a process with this host's
    # paths (the venv and Isaac Lab at the same place on every node).
    container: bool = False

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not RAY_LABEL_KEY_RE.fullmatch(k):
                raise ValueError(f'"{k}" is not a Ray node label key (e.g. "gpu-type" or "example.com/zone")')
        return v

    @property
    def memory_bytes(self) -> int | None:
        return size_bytes(self.memory) if self.memory else None

    def demand(self) -> dict[str, float]:
        """The Ray resources one attempt needs, as Ray names them."""
        d = {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources}
        if self.memory_bytes:
            d["memory"] = float(self.memory_bytes)
        return {k: v for k, v in d.items() if v}


class JobConfig(_Model):
    name: str
    runtime: Literal["process", "podman", "systemd", "ray"] = "process"
    # The trainer contract (daemon/workflows/): "builtin" is isaacd's own Isaac Lab-faithful trainer;
    # "rsl_rl", "rl_games", "skrl" are Isaac Lab's train scripts for those libraries.
    workflow: Literal["builtin", "rsl_rl", "rl_games", "skrl"] = "builtin"
    task: str = "Isaacd-Cartpole-v0"
    experiment: str | None = None
    num_envs: Annotated[int, Field(gt=0, le=1_000_000)] = 256
    seed: int = 42
    max_iterations: Annotated[int, Field(gt=0)] = 300
    save_interval: Annotated[int, Field(gt=0)] = 10
    device: str = "cpu"
    # GPU indices, UUIDs ("GPU-...", "MIG-..."), or "all"; several GPUs run one rank each under torchrun
    # or a count (gpus = 2: whole GPUs, one rank each) that isaacd places (issue 31, docs/queue.md)
    gpus: list[int | str] | Literal["all"] | Annotated[int, Field(ge=1, le=64)] = []
    nproc_per_node: Annotated[int, Field(ge=1, le=64)] | None = None
    share_gpus: bool = False  # allow other jobs with share_gpus on the same GPUs
    # What one rank needs on one GPU ("12GiB"): isaacd places the job on a GPU with that much room, beside others
    # (with gpus = N: N GPUs, that much on each). A job placed by isaacd waits in the queue until it fits.
    gpu_memory: Size | None = None  # "12GiB" (2^30 bytes each) or "12GB" (10^9): config/sizes.py
    priority: int = 0  # the queue's order: higher first, then the earlier submitted
    # a job of a higher priority that does not fit may stop this one (saved at the next iteration boundary, 0 lost)
    # and queue it again in its old place, after it ran [queue] min_run_seconds
    preemptible: bool = True
    # who the job belongs to, and runs as (issue 32): a job file's owner, a submitter; set here only by an admin.
    # None: the supervisor's own user (a job of the host config, as before)
    owner: str | None = None
    log_root: Path = Path("logs")
    extra_args: list[str] = []  # more trainer flags and Hydra overrides (env.*=..., agent.*=...)
    environment: dict[str, str] = {}
    autostart: bool = True
    stop_timeout: PositiveSeconds = 30.0
    # A raw trainer program (process runtime) or container command: replaces launcher + shim + script.
    command: list[str] | None = None
    # Where Isaac Lab is: a checkout on the host (process runtime) or inside the image (containers,
    # default /workspace/isaaclab as in NVIDIA's isaac-lab images).
    isaaclab_dir: Path | None = None
    # "2.0", "2.3", "3.0", ... when isaacd cannot read it from isaaclab_dir/VERSION or the image tag.
    isaaclab_version: str | None = None
    # The train script: relative to isaaclab_dir, or absolute (an extension project's
    # scripts/rsl_rl/train.py, the common case). Default: Isaac Lab's own for the library.
    train_script: str | None = None
    # How to start Python: default `<isaaclab_dir>/isaaclab.sh -p` (builtin: this venv's python, "python" in a
    # container); e.g. ["/opt/conda/envs/il/bin/python"].
    launcher: list[str] | None = None
    agent: str | None = None  # --agent: the agent config entry point (default: the library's)
    # Run the train script through isaacd's launcher shim (same process): a stop saves a checkpoint
    # at the next iteration boundary, and the run dir and checkpoints are reported, not guessed.
    shim: bool = True
    # Issue 11, instant recovery (both through the shim, so rsl_rl and builtin jobs):
    # a warm spare trainer waits ready and takes over at a crash (process runtime, single rank, shim on).
    # "imports": torch, rsl_rl and the CUDA context loaded (one idle Python process, ~0.5-1 GiB RSS, and on a GPU
    # one CUDA context, ~0.5 GiB). "booted" (issue 21): the job's train script has run through environment
    # creation and runner construction and waits at learn() (a second environment: about the trainer's own memory).
    # "off": none. None or true = "auto": booted for rsl_rl jobs when the device has room for it (daemon/attempt/spare_mode.py,
    # README "warm spare"), imports-only otherwise; false = "off".
    spare: bool | Literal["auto", "booted", "imports", "off"] | None = None
    spare_preload: list[str] = []  # more modules the spare imports ahead (e.g. your extension's tasks package)
    # The shim snapshots the runner's state every N iterations (0: never) into the run dir as
    # isaacd_snapshot_<N>.pt, at most once per snapshot_min_seconds; a resume picks the newest of snapshots and
    # checkpoints, so a crash costs at most N iterations instead of up to save_interval.
    snapshot_every: Annotated[int, Field(ge=0)] = 1
    snapshot_min_seconds: Annotated[float, Field(ge=0)] = 0.0
    # ...and only while snapshots cost at most this share of training time (copy + write, measured): a real task's
    # ~1 s iterations get one every iteration; a toy at 0.1 s/iteration one every few. 0: no budget.
    snapshot_budget: Annotated[float, Field(ge=0, le=1)] = 0.01
    # Compile caches that survive a restart (daemon/caches/compile_caches.py): Warp's kernel cache (WARP_CACHE_PATH) and, in
    # containers of Isaac Sim-based images, Kit's caches, in <state_dir>/caches/<job> ("job"), one directory per
    # image shared by its jobs ("image"; process-runtime jobs: per job), or none ("off").
    compile_cache: str = "job"
    restart: RestartPolicy = RestartPolicy()
    oom: OomPolicy = OomPolicy()  # CUDA out of memory at start-up: retry once, or step num_envs down
    launch: LaunchDeadlines = LaunchDeadlines()  # [jobs.launch]: the deadlines of a launch's waits (issue 28)
    container: ContainerConfig = ContainerConfig()
    ray: RayJobConfig = RayJobConfig()  # runtime = "ray": resources and node choice
    backup: BackupConfig | None = None  # [jobs.backup]: complete checkpoints copied to object storage (issue 22)
    eval: EvalConfig | None = None  # [jobs.eval]: checkpoints evaluated beside training (issue 41)
    watchdogs: WatchdogsConfig = WatchdogsConfig()

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not JOB_NAME_RE.fullmatch(v):
            raise ValueError("must be 1-63 chars of a-z, 0-9, '_', '.', '-' starting with a letter or digit "
                             "(it becomes a unit and container name)")
        return v

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: Any) -> Any:
        if v == "all" or isinstance(v, int):
            return v
        for g in v:
            if isinstance(g, int) and g < 0:
                raise ValueError(f"GPU index {g} is negative")
            if isinstance(g, str) and not re.fullmatch(r"(GPU|MIG)-[0-9a-fA-F-]+|\d+:\d+|[\w.-]+/[\w.-]+=\S+", g):
                raise ValueError(f'"{g}" is not a GPU: use an index (0), a UUID ("GPU-8f1c...", "MIG-..."), '
                                 'a MIG device "0:1", a CDI name, or gpus = "all"')
        if len({str(g) for g in v}) != len(v):
            raise ValueError("lists a GPU twice")
        return v

    @property
    def ranks(self) -> int:
        """Processes per node: nproc_per_node, else one per listed (or counted) GPU."""
        if self.nproc_per_node is not None:
            return self.nproc_per_node
        if isinstance(self.gpus, int):
            return self.gpus
        return len(self.gpus) if isinstance(self.gpus, list) and len(self.gpus) > 1 else 1

    @property
    def placed_by_isaacd(self) -> bool:
        """It asks for GPUs (a count, or gpu_memory) rather than naming them: the queue places it (scheduling/).
        Read it from the config as written: the placed copy a launch uses names its GPUs."""
        return self.runtime != "ray" and (isinstance(self.gpus, int) or self.gpu_memory is not None)

    @property
    def gpu_memory_bytes(self) -> int | None:
        return size_bytes(self.gpu_memory) if self.gpu_memory else None

    @model_validator(mode="before")
    @classmethod
    def _placed_jobs_use_cuda(cls, data: Any) -> Any:
        """A job that asks for GPUs trains on them unless it says otherwise (device = "cpu": the tests' CPU
        trainers on a scripted host)."""
        if isinstance(data, dict) and "device" not in data and (
                (isinstance(data.get("gpus"), int) and not isinstance(data.get("gpus"), bool))
                or data.get("gpu_memory") is not None):
            return {**data, "device": "cuda"}
        return data

    @field_validator("owner")
    @classmethod
    def _owner(cls, v: str | None) -> str | None:
        if v is not None and not NAME_RE.fullmatch(v):
            raise ValueError(f'"{v}" is not a user name (lower-case letters, digits, "_", "-", ".")')
        return v

    @field_validator("gpu_memory")
    @classmethod
    def _gpu_memory(cls, v: str | None) -> str | None:
        if v is not None and size_bytes(v) <= 0:
            raise ValueError('must be more than 0, e.g. "12GiB"')
        return v

    @model_validator(mode="after")
    def _placement(self) -> "JobConfig":
        asked = isinstance(self.gpus, int) or self.gpu_memory is not None
        if not asked:
            return self
        if self.runtime == "ray":
            raise ValueError('runtime = "ray": Ray places the job; remove gpus/gpu_memory and ask in [jobs.ray] '
                             'num_gpus')
        if self.gpu_memory is not None and not isinstance(self.gpus, int) and self.gpus:
            raise ValueError("gpu_memory asks isaacd to place the job, gpus = [...] pins it to those GPUs: keep one "
                             "(gpus = N counts GPUs for a placed job)")
        if isinstance(self.gpus, int) and self.nproc_per_node not in (None, self.gpus):
            raise ValueError(f"nproc_per_node = {self.nproc_per_node} with gpus = {self.gpus}: a placed job runs one "
                             "rank per GPU; remove nproc_per_node")
        if self.gpu_memory is not None and self.nproc_per_node not in (None, 1) and not isinstance(self.gpus, int):
            raise ValueError("nproc_per_node with gpu_memory: say how many GPUs with gpus = N (one rank each)")
        if re.fullmatch(r"cuda:\d+", self.device):
            raise ValueError(f'device = "{self.device}": isaacd picks the GPUs of a placed job; use device = "cuda"')
        if self.share_gpus:
            raise ValueError("share_gpus is for jobs that name their GPUs; a placed job shares a GPU by its "
                             "gpu_memory: remove share_gpus")
        return self

    @model_validator(mode="after")
    def _ranks_on_the_cpu(self) -> "JobConfig":
        """Several ranks run under torchrun with --distributed, which trains on GPUs only: Isaac Lab 3 refuses a CPU
        device there, the 2.x scripts and the built-in trainer put rank r on cuda:r whatever --device says (and
        crash-loop where there is no CUDA: "Cannot get CUDA generator"). A raw `command` is the job's own program."""
        if self.device != "cpu" or "device" not in self.model_fields_set or self.ranks < 2 or self.command is not None:
            return self  # (device unset beside a list of GPUs: rank r on cuda:r, as before)
        if isinstance(self.gpus, int):
            said, drop = f"gpus = {self.gpus}", "drop gpus (or gpus = 1: one rank, on the CPU)"
        elif self.nproc_per_node is not None:
            said, drop = f"nproc_per_node = {self.nproc_per_node}", "remove nproc_per_node (one rank, on the CPU)"
        else:
            said, drop = f"gpus = {json.dumps(self.gpus)}", "name one GPU (one rank, on the CPU)"
        raise ValueError(f'device = "cpu" with {said}: {self.ranks} ranks train under torchrun --distributed, which '
                         f'runs on GPUs only (Isaac Lab refuses a CPU device there); set device = "cuda" to train on '
                         f'the GPUs, or {drop}')

    @field_validator("compile_cache")
    @classmethod
    def _compile_cache(cls, v: str) -> str:
        if v not in ("job", "image", "off"):
            raise ValueError(f'compile_cache = "{v}": must be "job" (a directory per job), "image" (one per image, '
                             'shared) or "off" (no cache directories)')
        return v

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not DEVICE_RE.fullmatch(v):
            raise ValueError('must be "cpu", "cuda" or "cuda:N"')
        return v

    @field_validator("log_root", "isaaclab_dir", mode="before")
    @classmethod
    def _path(cls, v: Any) -> Any:
        return Path(v) if isinstance(v, str) else v

    @field_validator("isaaclab_version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"\d+\.\d+(\.\d+)?([.+-]\w+)*", v):
            raise ValueError('must be an Isaac Lab version such as "2.3", "2.3.2" or "3.0"')
        return v

    @field_validator("extra_args")
    @classmethod
    def _no_managed_flags(cls, v: list[str]) -> list[str]:
        managed = {"--resume", "--load_run", "--checkpoint", "--max_iterations", "--log_root", "--experiment_name",
                   "--run_name", "--rl_library", "agent.save_interval", "agent.resume", "agent.load_run",
                   "agent.load_checkpoint", "agent.max_iterations", "agent.experiment_name", "agent.run_name"}
        clash = sorted({a.split("=", 1)[0] for a in v} & managed)
        if clash:
            raise ValueError(f"{', '.join(clash)} are set by isaacd (it chooses the checkpoint to resume and owns "
                             "the run layout); remove them (save_interval and experiment are job keys)")
        return v

    @property
    def experiment_name(self) -> str:
        return self.experiment or self.name

    @property
    def in_container(self) -> bool:
        """The trainer runs in a container (paths inside it differ from the host's). Ray trainers run as
        processes on their node, where log_root and the venv are at the same paths as here, unless
        [jobs.ray] container is set."""
        return self.runtime in ("podman", "systemd") or (self.runtime == "ray" and self.ray.container)

    @model_validator(mode="after")
    def _oom_floor(self) -> "JobConfig":
        floor = self.oom.min_num_envs
        if floor is not None and floor > self.num_envs:
            raise ValueError(f"oom.min_num_envs = {floor} is above num_envs = {self.num_envs}: the floor of the "
                             "step-down must be at most the configured count; lower min_num_envs")
        if self.oom.step_down is not None and any(a.split("=", 1)[0] == "--num_envs" for a in self.extra_args):
            raise ValueError("extra_args sets --num_envs, which would override the count [jobs.oom] step_down "
                             "launches with; set the job's num_envs key instead")
        return self

    @model_validator(mode="after")
    def _eval_fits(self) -> "JobConfig":
        if (why := eval_refusal(self)) is not None:
            raise ValueError(why)
        return self

    @model_validator(mode="after")
    def _ray_gpus(self) -> "JobConfig":
        if self.runtime == "ray" and self.gpus:
            raise ValueError('runtime = "ray": Ray picks the GPUs on the node it places the job on; remove gpus '
                             'and ask for a count in [jobs.ray] num_gpus (device = "cuda" uses them)')
        return self


class Config(_Model):
    supervisor: SupervisorConfig = SupervisorConfig()
    metrics: MetricsConfig = MetricsConfig()
    gpu: GpuConfig = GpuConfig()
    ray: RayConfig | None = None
    queue: QueueConfig = QueueConfig()  # [queue]: placement and preemption of jobs that ask for GPUs (issue 31)
    access: AccessConfig = AccessConfig()  # [access]: what users who are no admins may ask for, and hold (issue 32)
    notify: NotifyConfig | None = None  # [notify]: a chat webhook told of each job's new best checkpoint (issue 41)
    jobs: list[JobConfig] = []

    @model_validator(mode="after")
    def _unique_names(self) -> "Config":
        seen: set[str] = set()
        for job in self.jobs:
            if job.name in seen:
                raise ValueError(f'duplicate job name "{job.name}": every [[jobs]] needs its own name')
            seen.add(job.name)
        return self

    @model_validator(mode="after")
    def _exclusive_gpus(self) -> "Config":
        """Two jobs on one GPU halve each other's throughput and can OOM it: only when both say share_gpus.
        Which GPUs a job uses is isaacd.gpu.assign.job_gpus, whatever the spelling (gpus, device)."""
        problems = [f'jobs[{i}] (name = "{j.name}"): {why}'
                    for i, j in enumerate(self.jobs) if (why := device_outside_gpus(j))]
        problems += [c.message(self.jobs) for c in gpu_conflicts(self.jobs)]
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @model_validator(mode="after")
    def _ray_section(self) -> "Config":
        users = [f'jobs[{i}] (name = "{j.name}")' for i, j in enumerate(self.jobs) if j.runtime == "ray"]
        if users and self.ray is None:
            raise ValueError(f'{", ".join(users)}: runtime = "ray" needs a [ray] section with the cluster\'s '
                             'address (address = "auto" when this host joined it with `ray start`)')
        return self

    def job(self, name: str) -> JobConfig | None:
        return next((j for j in self.jobs if j.name == name), None)


@dataclass(frozen=True)
class ConfigIssue:
    key: str
    message: str


class ConfigError(Exception):
    """A config that must not be used. `str()` is the full, user-facing report."""

    def __init__(self, path: str, issues: list[ConfigIssue]):
        self.path = path
        self.issues = issues
        lines = [f"{path}: {i.key}: {i.message}" if i.key else f"{path}: {i.message}" for i in issues]
        super().__init__("\n".join(lines))


def _issues_from(err: ValidationError, raw: dict[str, Any]) -> list[ConfigIssue]:
    """One issue per mistake, naming the key, the value and the fix (errors.py: a union's lines read as one)."""
    return [ConfigIssue(key, msg) for key, msg in type_errors.lines(err, raw, Config)]


def _resolve_paths(cfg: Config, base: Path) -> Config:
    """Relative paths in the file are relative to the file's directory, not to the cwd."""

    def rel(p: Path) -> Path:
        return p if p.is_absolute() else (base / p).resolve()

    sup = cfg.supervisor.model_copy(update={"state_dir": rel(cfg.supervisor.state_dir),
                                            "control_socket": rel(cfg.supervisor.control_socket),
                                            "jobs_dir": rel(cfg.supervisor.jobs_dir) if cfg.supervisor.jobs_dir
                                            else None})
    gpu = cfg.gpu.model_copy(update={"script": rel(cfg.gpu.script)}) if cfg.gpu.script else cfg.gpu
    # a job whose log_root is absolute already (every job file's: jobs_dir.with_paths_under) is kept as it is, not
    # copied: 1,000 copies a reload, and a copy is another object than the one _checked_drop_in hands back
    jobs = [j if j.log_root.is_absolute() else j.model_copy(update={"log_root": rel(j.log_root)}) for j in cfg.jobs]
    ray = cfg.ray.model_copy(update={"health_file": rel(cfg.ray.health_file)}) if cfg.ray else None
    return cfg.model_copy(update={"supervisor": sup, "gpu": gpu, "jobs": jobs, "ray": ray})


def check_job_table(job: dict[str, Any], source: str, ray: Any = None) -> JobConfig:
    """One [[jobs]] table validated on its own (a job file, a submitted job): ConfigError names `source` and the key."""
    try:
        return Config.model_validate({"jobs": [job], **({"ray": ray} if ray is not None else {})}).jobs[0]
    except ValidationError as exc:
        raise ConfigError(source, _issues_from(exc, {"jobs": [job]})) from None


def _with_drop_ins(raw: dict[str, Any], source: str, base_dir: Path) -> dict[str, Any]:
    """The host config's jobs and those of `[supervisor] jobs_dir`'s files (config/jobs_dir.py). Each file's job is
    validated alone first, so an error names that file and the key; a name two files (or a file and the host config)
    give is refused naming both."""
    jobs_dir = (raw.get("supervisor") or {}).get("jobs_dir") if isinstance(raw.get("supervisor"), dict) else None
    if not isinstance(jobs_dir, str):
        return raw
    directory = Path(jobs_dir) if Path(jobs_dir).is_absolute() else base_dir / jobs_dir
    if isinstance(raw["supervisor"].get("socket_group"), str) and (why := open_to_others(directory)):
        raise ConfigError(source, [ConfigIssue("supervisor.jobs_dir", why)])
    try:
        drop_ins = read_drop_ins(directory)
    except DropInError as exc:
        raise ConfigError(str(exc.path), [ConfigIssue(exc.key, exc.message)]) from None
    owners = {j.get("name"): source for j in raw.get("jobs", []) if isinstance(j, dict)}
    jobs = list(raw.get("jobs", [])) if isinstance(raw.get("jobs"), list) else []
    admin_group = raw["supervisor"].get("admin_group")
    users: UserLookups = {}  # each owner looked up once a reload, not once a file
    ray_key = json.dumps(raw.get("ray"), sort_keys=True, default=str)
    for d in drop_ins:
        try:
            job = with_paths_under(owned(d, admin_group if isinstance(admin_group, str) else None, users),
                                   d.path.parent)
        except DropInError as exc:
            raise ConfigError(str(exc.path), [ConfigIssue(exc.key, exc.message)]) from None
        checked = _checked_drop_in(d, job, ray_key, raw.get("ray"))
        if d.name in owners:
            raise ConfigError(str(d.path), [ConfigIssue("jobs[0].name", f'"{d.name}" is already a job of '
                                                        f'{owners[d.name]}; give this job another name')])
        owners[d.name] = str(d.path)
        jobs.append(checked)  # validated already: the whole config's validation takes the model as it is
    return {**raw, "jobs": jobs}


@dataclass(frozen=True)
class _Checked:
    drop_in: DropIn  # the file's parse (jobs_dir.DropInCache hands back this same object while the file is unchanged)
    derived: tuple[Any, ...]  # what the job took from outside its file: its owner, its paths resolved
    ray: str  # the [ray] it was checked against, as JSON
    job: JobConfig


# A job file's validated job while its file, its owner, its resolved paths and the [ray] it was checked against are
# unchanged (issue 39: with 1,000 submitted jobs each reload validated every one twice, then compared each as JSON).
# The file's table is the same object or the file is read again; what the job adds to it is compared as values.
# JobConfig is frozen, so one instance can be in the old config and the new.
_CHECKED: dict[str, _Checked] = {}


def _checked_drop_in(d: DropIn, job: dict[str, Any], ray_key: str, ray: Any) -> JobConfig:
    source = str(d.path)
    derived = (job.get("owner"), job.get("log_root"), job.get("isaaclab_dir"))
    hit = _CHECKED.get(source)
    if hit is not None and hit.drop_in is d and hit.derived == derived and hit.ray == ray_key:
        return hit.job
    _CHECKED.pop(source, None)
    checked = check_job_table(job, source, ray)  # a refusal is never kept: a broken file is checked every time
    if len(_CHECKED) > 100_000:  # files come and go (cancelled, renamed): bound it
        _CHECKED.clear()
    _CHECKED[source] = _Checked(d, derived, ray_key, checked)
    return checked


def parse_config(text: str, source: str, base_dir: Path) -> Config:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, [ConfigIssue("", f"not valid TOML: {exc}")]) from None
    raw = _with_drop_ins(raw, source, base_dir)
    try:
        cfg = Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(source, _issues_from(exc, raw)) from None
    return _resolve_paths(cfg, base_dir)


def read_text_file(path: Path) -> str:
    """A config-like file's text (the host config, a sweep file), or ConfigError naming it and why it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), [ConfigIssue("", f"cannot read: {exc.strerror}")]) from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), [ConfigIssue("", "not UTF-8 text")]) from None


def load_config(path: str | Path) -> Config:
    path = Path(path)
    return parse_config(read_text_file(path), str(path), path.resolve().parent)


def embedded_default_text() -> str:
    return resources.files("isaacd").joinpath("default.toml").read_text(encoding="utf-8")


def load_embedded_default(base_dir: Path) -> Config:
    """The config `isaacd run` uses when none is given: one builtin job, state under base_dir/var."""
    return parse_config(embedded_default_text(), EMBEDDED_DEFAULT_NAME, base_dir)
