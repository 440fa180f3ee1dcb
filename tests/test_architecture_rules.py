"""The rules of docs/architecture.md that can be checked mechanically, read off the source (no process runs).

Each check names the file and line that breaks it, and each has a synthetic breach it must catch, so a check
that silently stopped looking fails too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (ROOT / "daemon", ROOT / "trainer")
MAX_CLASS_LINES = 350  # issue 30: a class past this does more than one job


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in pkg.rglob("*.py"))


def long_classes(tree: ast.AST, path: str, limit: int = MAX_CLASS_LINES) -> list[str]:
    return [f"{path}:{n.lineno} class {n.name} is {n.end_lineno - n.lineno + 1} lines (at most {limit})"
            for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.end_lineno is not None
            and n.end_lineno - n.lineno + 1 > limit]


def test_no_class_in_daemon_or_trainer_is_over_350_lines() -> None:
    found = [msg for p in _sources() for msg in long_classes(ast.parse(p.read_text()), str(p.relative_to(ROOT)))]
    assert not found, "\n".join(found)


def test_the_class_size_check_catches_a_long_class() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    assert long_classes(ast.parse(f"class Big:\n{body}\n"), "synthetic.py") == \
        [f"synthetic.py:1 class Big is {MAX_CLASS_LINES + 1} lines (at most {MAX_CLASS_LINES})"]


def forwarding_descriptors(tree: ast.AST, path: str) -> list[str]:
    """Classes defining `__get__`: a descriptor that forwards a class's attributes to its parts is how JobRunner once
    stayed under the size limit while doing every part's job (issue 38); a part's fact is read from that part."""
    return [f"{path}:{f.lineno} class {c.name} defines __get__ (read the part that owns the fact instead)"
            for c in ast.walk(tree) if isinstance(c, ast.ClassDef)
            for f in c.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name == "__get__"]


def test_no_class_is_kept_small_by_forwarding_descriptors() -> None:
    found = [m for p in _sources() for m in forwarding_descriptors(ast.parse(p.read_text()), str(p.relative_to(ROOT)))]
    assert not found, "\n".join(found)


def test_the_forwarding_check_catches_a_descriptor() -> None:
    breach = "class Kept:\n    def __set_name__(self, o, n): pass\n    def __get__(self, obj, owner=None):\n        return 1\n"
    assert forwarding_descriptors(ast.parse(breach), "synthetic.py") == \
        ["synthetic.py:3 class Kept defines __get__ (read the part that owns the fact instead)"]


# "One place acts": who may kill, signal or launch. The effect interpreter (runner.py: JobRunner._apply, and
# apply_spare for the spare keeper's decisions), the runtimes it calls, and the OS seam they call.
ACTORS = ("daemon/runner.py", "daemon/runtimes/", "daemon/os_seam/")
KILL_CALLS = ("kill", "killpg")  # os.kill, os.killpg, runtime.kill, oscalls.killpg, ...: any receiver
RUNTIME_CALLS = ("start", "signal")  # only on a runtime: a thread's start() and signal.signal() are no acts
# (path, call) -> why it may stay; empty: every act goes through the interpreter
ACTS_ALLOWED: dict[tuple[str, str], str] = {}


def _receiver(func: ast.Attribute) -> str:
    """The name of what an attribute call is made on: `self.runtime.start` -> "runtime", `rt.kill` -> "rt"."""
    value = func.value
    return value.attr if isinstance(value, ast.Attribute) else value.id if isinstance(value, ast.Name) else ""


def _is_runtime(name: str) -> bool:
    return "runtime" in name.lower() or name == "rt"


def acts_outside_the_interpreter(tree: ast.AST, path: str) -> list[str]:
    """Kills, signals and launches in `path`, if it is not one of ACTORS (less ACTS_ALLOWED): `file:line call`."""
    if path.startswith(ACTORS):
        return []
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in KILL_CALLS:  # `from os import kill`
            call = func.id
        elif isinstance(func, ast.Attribute) and (func.attr in KILL_CALLS or func.attr in RUNTIME_CALLS
                                                  and _is_runtime(_receiver(func))):
            call = ast.unparse(func)
        else:
            continue
        if (path, call) not in ACTS_ALLOWED:
            found.append(f"{path}:{node.lineno} {call}(...) acts outside the effect interpreter")
    return found


def test_only_the_effect_interpreter_the_runtimes_and_the_os_seam_kill_signal_or_launch() -> None:
    found = [msg for p in sorted((ROOT / "daemon").rglob("*.py"))
             for msg in acts_outside_the_interpreter(ast.parse(p.read_text()), str(p.relative_to(ROOT)))]
    assert not found, "\n".join(found)


def test_the_acts_check_catches_kills_signals_and_launches_outside_the_interpreter() -> None:
    breach = ("import os\nfrom os import kill\n"
              "def f(self, rt, pid):\n"
              "    os.kill(pid, 9)\n    os.killpg(pid, 9)\n    kill(pid, 0)\n    self.spares.kill('why')\n"
              "    self.runtime.start(spec)\n    rt.signal(h, 2)\n    self.runtime.kill(h)\n"
              "    self._thread.start()\n    signal.signal(2, f)\n")  # the last two are no acts
    assert acts_outside_the_interpreter(ast.parse(breach), "daemon/attempt/x.py") == [
        f"daemon/attempt/x.py:{n} {call}(...) acts outside the effect interpreter" for n, call in
        [(4, "os.kill"), (5, "os.killpg"), (6, "kill"), (7, "self.spares.kill"), (8, "self.runtime.start"),
         (9, "rt.signal"), (10, "self.runtime.kill")]]
    assert acts_outside_the_interpreter(ast.parse(breach), "daemon/runtimes/x.py") == []


# "One home for each fact": a part returns its typed status value; no dict travels between parts as a status.
STATUS_FUNCTIONS = ("status", "snapshot")  # and every name ending in "_status"
# a mapping may be a status's part where its values are numbers (name -> number: JobStatus.scalars by tag,
# cuda_ooms by phase, restarts_by_reason by reason; a table of counts, nothing to parse) or typed status
# values by name (JobStatus.watchdogs, GpuDeviceStatus.xids): the values say what they are
MAPPING_VALUES_ALLOWED = {"int", "float"}
# (path, function) -> why it may still return a dict
DICT_STATUS_ALLOWED: dict[tuple[str, str], str] = {
    ("daemon/runtimes/ray_actor.py", "status"): "the Ray actor's answer on the worker node: plain data across Ray's "
                                                "RPC, folded by ray_attempts.py into the runtime's view",
}


def _status_classes() -> set[str]:
    """The typed status values: the dataclasses of status/types.py and of the parts' status modules."""
    names: set[str] = set()
    for path in (ROOT / "daemon/status/types.py", ROOT / "daemon/backup/status.py"):
        names |= {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)}
    return names


def dict_annotations(annotation: ast.expr | None, typed: set[str]) -> list[str]:
    """The mappings in an annotation whose values are neither numbers nor typed status values: `dict`,
    `dict[str, Any]`, `Dict[...]`, `Mapping[str, Any]`, `dict[str, dict[str, int]]`, inside `X | None` too."""
    if annotation is None:
        return []
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):  # a quoted annotation
        return dict_annotations(ast.parse(annotation.value, mode="eval").body, typed)
    found = []
    for node in ast.walk(annotation):
        base = node.value if isinstance(node, ast.Subscript) else node
        name = base.attr if isinstance(base, ast.Attribute) else base.id if isinstance(base, ast.Name) else ""
        if name not in ("dict", "Dict", "Mapping", "MutableMapping"):
            continue
        if isinstance(node, ast.Subscript):
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            value = args[-1]
            if isinstance(value, ast.Name) and (value.id in MAPPING_VALUES_ALLOWED or value.id in typed):
                continue
        elif any(isinstance(s, ast.Subscript) and s.value is node for s in ast.walk(annotation)):
            continue  # the `dict` of `dict[...]`: judged as the subscript
        found.append(ast.unparse(node))
    return found


def dict_statuses(tree: ast.AST, path: str, typed: set[str]) -> list[str]:
    """Status functions returning a dict, and fields of Status / JobStatus annotated as one: `file:line what`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                (node.name in STATUS_FUNCTIONS or node.name.endswith("_status")) and \
                (path, node.name) not in DICT_STATUS_ALLOWED:
            found += [f"{path}:{node.lineno} {node.name}() returns {d}" for d in dict_annotations(node.returns, typed)]
        if isinstance(node, ast.ClassDef) and node.name in ("Status", "JobStatus") and path == "daemon/status/types.py":
            found += [f"{path}:{f.lineno} {node.name}.{f.target.id} is {d}" for f in node.body
                      if isinstance(f, ast.AnnAssign) and isinstance(f.target, ast.Name)
                      for d in dict_annotations(f.annotation, typed)]
    return sorted(found, key=lambda msg: int(msg.split(":")[1].split()[0]))  # by line


def test_no_part_returns_its_status_as_a_dict() -> None:
    typed = _status_classes()
    found = [msg for p in sorted((ROOT / "daemon").rglob("*.py"))
             for msg in dict_statuses(ast.parse(p.read_text()), str(p.relative_to(ROOT)), typed)]
    assert not found, "\n".join(found)
    assert {"JobStatus", "GpusStatus", "SpareStatus", "BackupStatus", "WatchdogStatus"} <= typed


def test_the_dict_status_check_catches_dicts_returned_and_carried() -> None:
    breach = ("from typing import Any, Dict, Mapping\n"
              "class Keeper:\n"
              "    def status(self) -> dict[str, Any]: ...\n"
              "    def job_status(self, name: str) -> 'Dict[str, Any] | None': ...\n"
              "    def snapshot(self) -> Mapping[str, Any]: ...\n"
              "    def gpu_status(self) -> dict: ...\n"
              "    def spare_status(self) -> SpareStatus: ...\n"
              "    def counts_status(self) -> dict[str, int]: ...\n"
              "    def other(self) -> dict[str, Any]: ...\n"
              "class JobStatus:\n"
              "    spare: dict[str, Any] | None = None\n"
              "    backup: Mapping[str, dict[str, int]] = None\n"
              "    scalars: dict[str, float] = None\n"
              "    watchdogs: dict[str, WatchdogStatus] = None\n")
    assert dict_statuses(ast.parse(breach), "daemon/status/types.py", {"SpareStatus", "WatchdogStatus"}) == [
        "daemon/status/types.py:3 status() returns dict[str, Any]",
        "daemon/status/types.py:4 job_status() returns Dict[str, Any]",
        "daemon/status/types.py:5 snapshot() returns Mapping[str, Any]",
        "daemon/status/types.py:6 gpu_status() returns dict",
        "daemon/status/types.py:11 JobStatus.spare is dict[str, Any]",
        "daemon/status/types.py:12 JobStatus.backup is Mapping[str, dict[str, int]]"]


# "Nothing on the tick waits for a subprocess" (issue 38): a launcher's Isaac Lab version probe runs on a thread of its
# own (workflows/installed.py); the tick asks without waiting. The modules of the launch's resolve path never run a
# program themselves, and every call in the daemon that may probe says it does not wait; only the client (cli/:
# check-config, doctor) and workflows/ itself (the probe's home, and check-config's registry) may.
TICK_RESOLVE_PATH = ("daemon/attempt/planner.py", "daemon/attempt/setting.py", "daemon/workflows/__init__.py",
                     "daemon/workflows/detect.py", "daemon/workflows/launcher.py", "daemon/workflows/base.py",
                     "daemon/workflows/rsl_rl.py", "daemon/workflows/rl_games.py", "daemon/workflows/skrl.py")
BLOCKING_OS_CALLS = ("system", "popen", "wait", "waitpid")  # os.system(...), os.popen(...), ...
PROBING_CALLS = {"resolve": "wait_probe", "detect_generation": "wait_probe", "installed_isaaclab": "wait"}
# runs_workflow never waits (a job's runs on disk do not depend on the probe's answer)
PROBE_WAIT_FREE = ("daemon/cli/", "daemon/workflows/")
# (path, call) -> why it may wait for the probe
PROBE_WAIT_ALLOWED: dict[tuple[str, str], str] = {
    ("daemon/runtimes/container_spec.py", "resolve"): "a container's job: its generation is the image's or "
                                                      "isaaclab_version, never a probe",
    ("daemon/runtimes/trainer_command.py", "resolve"): "only where no Resolved is handed in: every caller in the "
                                                       "daemon hands one in (planner.py, spare_launch.py); tests "
                                                       "call it bare",
}


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name.split(".")[0] for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module.split(".")[0]]
    return []


def tick_waits(tree: ast.AST, path: str) -> list[str]:
    """A program run on the tick's resolve path, or a probing call outside the client that may wait for the probe."""
    found = []
    for node in ast.walk(tree):
        if path in TICK_RESOLVE_PATH:
            if "subprocess" in _imported(node):
                found.append(f"{path}:{node.lineno} imports subprocess on the tick's resolve path")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and _receiver(node.func) == "os" and node.func.attr in BLOCKING_OS_CALLS:
                found.append(f"{path}:{node.lineno} os.{node.func.attr}(...) on the tick's resolve path")
        if path.startswith(PROBE_WAIT_FREE) or not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
            continue
        name = node.func.id
        if name not in PROBING_CALLS or (path, name) in PROBE_WAIT_ALLOWED:
            continue
        if not any(k.arg == PROBING_CALLS[name] and isinstance(k.value, ast.Constant) and k.value.value is False
                   for k in node.keywords):
            found.append(f"{path}:{node.lineno} {name}(...) may wait for the launcher's probe "
                         f"(pass {PROBING_CALLS[name]}=False)")
    return found


def test_nothing_on_the_tick_waits_for_a_launchers_probe() -> None:
    found = [msg for p in sorted((ROOT / "daemon").rglob("*.py"))
             for msg in tick_waits(ast.parse(p.read_text()), str(p.relative_to(ROOT)))]
    assert not found, "\n".join(found)
    assert all((ROOT / p).is_file() for p in TICK_RESOLVE_PATH)  # a file renamed away is no longer checked


def test_the_tick_wait_check_catches_a_subprocess_and_a_waiting_resolve() -> None:
    breach = ("import subprocess\nfrom subprocess import run\nimport os\n"
              "def plan(cfg):\n"
              "    os.system('python -c 1')\n"
              "    resolve(cfg)\n    resolve(cfg, wait_probe=False)\n    installed_isaaclab(['py'], None)\n"
              "    Path('x').resolve()\n")
    assert tick_waits(ast.parse(breach), "daemon/attempt/planner.py") == [
        "daemon/attempt/planner.py:1 imports subprocess on the tick's resolve path",
        "daemon/attempt/planner.py:2 imports subprocess on the tick's resolve path",
        "daemon/attempt/planner.py:5 os.system(...) on the tick's resolve path",
        "daemon/attempt/planner.py:6 resolve(...) may wait for the launcher's probe (pass wait_probe=False)",
        "daemon/attempt/planner.py:8 installed_isaaclab(...) may wait for the launcher's probe (pass wait=False)"]
    assert tick_waits(ast.parse(breach), "daemon/cli/x.py") == []  # the client may wait


# "A launch's preparation runs on a worker" (issue 38): the launch pipeline (`launch.pipeline.prepare`, its steps'
# directories and disk reads) is called only from a `_prepare` method, and a `_prepare` method is only ever handed to a
# `Preparation` (launch/worker.py, a thread of its own), never called on the tick.
PREPARED_ON_A_WORKER = "_prepare"


def prepared_on_the_tick(tree: ast.AST, path: str) -> list[str]:
    found = []
    in_worker_fn: set[int] = set()  # ids of the calls inside a `_prepare` function's body
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == PREPARED_ON_A_WORKER:
            in_worker_fn.update(id(n) for n in ast.walk(fn))
    handed: set[int] = set()  # ids of the calls inside a Preparation(...) argument
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Preparation":
            for arg in node.args:
                handed.update(id(n) for n in ast.walk(arg))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name) and node.func.id == "prepare" and id(node) not in in_worker_fn:
            found.append(f"{path}:{node.lineno} the launch pipeline's prepare(...) outside a {PREPARED_ON_A_WORKER} "
                         "method (it runs on the tick)")
        if isinstance(node.func, ast.Attribute) and node.func.attr == PREPARED_ON_A_WORKER and id(node) not in handed:
            found.append(f"{path}:{node.lineno} {PREPARED_ON_A_WORKER}(...) called, not handed to a Preparation "
                         "(launch/worker.py)")
    return found


def test_a_launchs_preparation_runs_on_a_worker_never_on_the_tick() -> None:
    found = [msg for p in sorted((ROOT / "daemon").rglob("*.py")) if "launch" not in p.relative_to(ROOT).parts[1:2]
             for msg in prepared_on_the_tick(ast.parse(p.read_text()), str(p.relative_to(ROOT)))]
    assert not found, "\n".join(found)
    callers = [p.name for p in (ROOT / "daemon").rglob("*.py") if "Preparation(" in p.read_text()
               and "launch" not in p.relative_to(ROOT).parts[1:2]]
    assert sorted(callers) == ["evals.py", "planner.py", "spare.py"]  # every role of the pipeline is checked


def test_the_worker_check_catches_a_pipeline_run_on_the_tick() -> None:
    breach = ("def plan(self):\n"
              "    spec = prepare(ctx)\n"
              "    return self._prepare(1)\n"
              "def _prepare(self, n):\n"
              "    return prepare(ctx)\n"
              "def start(self):\n"
              "    return Preparation(lambda say: self._prepare(2))\n")
    assert prepared_on_the_tick(ast.parse(breach), "daemon/attempt/x.py") == [
        "daemon/attempt/x.py:2 the launch pipeline's prepare(...) outside a _prepare method (it runs on the tick)",
        "daemon/attempt/x.py:3 _prepare(...) called, not handed to a Preparation (launch/worker.py)"]
