"""Is this trainer's last output an error that no restart can fix? The forms upstream prints, and the config key.

A trainer told to train a task its registry lacks, handed a Hydra override or a flag its parser rejects, or pointed
at a module or file that is not there exits like any crash (code 1, or argparse's 2), and fails the same way on
every restart: on an Isaac Sim host each of those restarts is a full boot of minutes. Only the output says why, so
the exit's output tail (exit_tail.py) is matched against the texts the code under an Isaac Lab trainer really prints.
Each form names the source it was read from (the isaaclab 3.0.0 wheel and its dependencies in .venv-isaaclab3 are
the code of record; Isaac Lab 2.x is isaac-sim/IsaacLab @f6e936b3 / 011c373c):

unknown task (``kind = "unknown_task"``, key ``task``)
    Isaac Lab looks the task up with ``gym.spec(task_name.split(":")[-1])`` before anything boots: 3.0.0
    isaaclab_tasks/utils/parse_cfg.py:66 (``load_cfg_from_registry``, from hydra.py:586 ``register_task``); 2.x the
    same call in parse_cfg.py, from hydra.py ``hydra_task_config``'s wrapper, outside ``hydra.main`` (so Hydra
    does not catch it). gymnasium/envs/registration.py (1.4.0; Isaac Lab 2.3 pins gymnasium 1.2.1, same texts):
    ``_check_name_exists`` (:366) ``NameNotFound: Environment `X` doesn't exist. Did you mean: `Y`?``,
    ``_check_version_exists`` (:407, :422, :425) ``DeprecatedEnv`` / ``VersionNotFound``, ``_check_namespace_exists``
    (:346) ``NamespaceNotFound``, ``spec`` (:1009) ``Error: No registered env with id: X``. Uncaught: Python prints
    ``gymnasium.error.NameNotFound: ...`` and exits 1 (seen on the real 3.0.0 here, 4.5 s after the launch).
unknown agent config (``kind = "unknown_agent"``, key ``agent`` or ``workflow``)
    3.0.0 parse_cfg.py:95 "Could not find RL configuration '<lib>_cfg_entry_point' for task ..." (the task has no
    config for this library) and :106 "Could not find configuration for the environment: ..." (an ``--agent``
    entry point the task does not register); 2.x the latter.
Hydra override (``kind = "hydra_override"``, key ``extra_args``)
    hydra-core 1.3: core/override_parser/overrides_parser.py:95 "Error parsing override '<o>'" (and the
    LexerNoViableAltException form above it); _internal/config_loader_impl.py:393 "Could not override '<key>'.",
    :380 "Could not append to config. ...", :352/:357 "Could not delete from config. ...", :398 "Error merging
    override <o>". They are CompactHydraExceptions: _internal/utils.py:224 ``run_and_report`` prints the message
    alone (no traceback), then "Set the environment variable HYDRA_FULL_ERROR=1 ...", and exits 1 (:303).
argparse (``kind = "argparse"``, key ``extra_args``)
    Python 3.11 argparse.py:2630 ``ArgumentParser.error``: the usage, then "<prog>: error: <message>", exit 2.
    Counted only with exit code 2.
missing module (``kind = "missing_module"``, key: the one naming it, else ``launcher``)
    importlib/_bootstrap.py:1117 ``_ERR_MSG_PREFIX = 'No module named '``: "ModuleNotFoundError: No module named
    'x'"; Isaac Lab's ``string_to_callable`` (3.0.0 isaaclab/utils/string.py:185, used for ``--external_callback``)
    re-raises it as "ValueError: Could not resolve the input string 'x' into callable object. ...".
missing file (``kind = "missing_file"``, key: the one naming it)
    "FileNotFoundError: [Errno 2] No such file or directory: 'p'" (the OS) and Isaac Lab's "FileNotFoundError:
    Unable to find the file: p" (3.0.0 isaaclab/utils/assets.py:726); only when the config names that file, since a
    file that went missing on its own (a moved checkpoint) may be back by the next attempt.

no CUDA (``kind = "no_cuda"``, key ``device``, or ``environment.CUDA_VISIBLE_DEVICES`` when the job sets it)
    The trainer asks for a GPU that its torch or the host cannot give it, which every restart asks again: a CPU
    build of torch (torch 2.13.0+cpu here, captured in tests/exit_outputs/: ``torch.Generator(device="cuda")``
    "RuntimeError: Cannot get CUDA generator without ATen_cuda library. ...", and torch/cuda/__init__.py
    ``_lazy_init`` "AssertionError: Torch not compiled with CUDA enabled"), a multi-rank job on ``device = "cpu"``
    (each torchrun rank takes ``cuda:<LOCAL_RANK>``, as Isaac Lab's train scripts do), a host or a
    CUDA_VISIBLE_DEVICES with no GPU (``_lazy_init``: "RuntimeError: No CUDA GPUs are available", "Found no NVIDIA
    driver on your system"), a rank past the GPUs it sees ("CUDA error: invalid device ordinal").
not executable, no such program (``kind = "not_executable"`` / ``"missing_program"``, key ``launcher``)
    Not the trainer's output: the runtime's start itself failed (the kernel's EACCES, ENOENT, ENOEXEC at exec:
    start_fault.py classifies the exception), or a shell wrapper's own words for its interpreter: bash's
    "<path>: <interpreter>: bad interpreter: Permission denied" / "No such file or directory" (exit 126 / 127).

Only the decisive line counts: the output is read from its end, and the first line that is either one of these
forms or any other Python exception's last line decides (a ModuleNotFoundError logged and survived early on, then
a crash of another kind, is that other kind: it restarts as before).

Pure: text in, a verdict out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import PurePath
from typing import Iterable, Mapping, Sequence

KINDS = ("unknown_task", "unknown_agent", "hydra_override", "argparse", "missing_module", "missing_file", "no_cuda",
         "not_executable", "missing_program")

# key -> the values of the job's config that a trainer's error could name (named_in_config builds it)
Named = Mapping[str, Sequence[str]]

_GYM = re.compile(r"^(?:gymnasium|gym)\.error\.(?:(?:NameNotFound|VersionNotFound|DeprecatedEnv|NamespaceNotFound|"
                  r"UnregisteredEnv): .*|Error: (?:No registered env with id|Malformed environment ID): .*)$")
_RL_CFG = re.compile(r"^ValueError: Could not find RL configuration '(?P<s>[^']+)' for task")
_AGENT_CFG = re.compile(r"^ValueError: Could not find configuration for the environment: '[^']*'")
_HYDRA = re.compile(r"^(?:hydra\.errors\.\w+: )?(?:Error parsing override '(?P<a>.*)'$|Could not override "
                    r"'(?P<b>[^']*)'|Could not append to config\. An item is already at '(?P<c>[^']*)'|Could not "
                    r"delete from config\.|Error merging override (?P<d>\S+)|LexerNoViableAltException: (?P<e>.*))")
_ARGPARSE = re.compile(r"^(?P<prog>[\w.\-]+): error: (?P<msg>.+)$")
_MODULE = re.compile(r"^(?:[\w.]+\.)?ModuleNotFoundError: No module named '(?P<s>[^']+)'")
_CALLABLE = re.compile(r"^ValueError: Could not resolve the input string '(?P<s>[^']+)' into callable object")
_FILE = re.compile(r"^(?:[\w.]+\.)?FileNotFoundError: (?:\[Errno 2\] No such file or directory: '(?P<a>[^']+)'"
                   r"|Unable to find the file: (?P<b>.+?))\s*$")
_NO_CUDA = re.compile(r"^(?:[\w.]+: )?(?:CUDA error: )?(?P<s>Cannot get CUDA generator without ATen_cuda library|Torch not "
                      r"compiled with CUDA enabled|No CUDA GPUs are available|Found no NVIDIA driver on your system|"
                      r"invalid device ordinal)")
# a shell's words when it cannot exec a program (bash 5.2: "./run.sh: line 2: /opt/x/train: Permission denied",
# "/opt/x/train: /root/.pyenv/.../python3: bad interpreter: Permission denied", "...: cannot execute: required file not
# found"); all but "bad interpreter" only with the shell's exit codes for them (126: not executable, 127: not found)
_BAD_INTERPRETER = re.compile(r"^(?:.*?: )?(?P<p>/?[^:\s]+): (?P<s>/?[^:\s]+): bad interpreter: "
                              r"(?P<why>Permission denied|No such file or directory)\s*$")
_SHELL_EXEC = re.compile(r"^(?:.*?: )?(?:line \d+: )?(?P<s>/?[^:\s]+): (?P<why>Permission denied|cannot execute: "
                         r"required file not found|No such file or directory)\s*$")
# any other exception's last line ("RuntimeError: ...", "torch.OutOfMemoryError: ...", "KeyboardInterrupt")
_OTHER = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")
_ARG_SUBJECT = re.compile(r"^(?:unrecognized arguments: (?P<a>\S+)|argument (?P<b>[^\s:/]+)[^:]*:|the following "
                          r"arguments? (?:are|is) required: (?P<c>[^,\s]+))")

_WHAT = {
    "unknown_task": "the trainer does not know the task",
    "unknown_agent": "the task has no such agent config",
    "hydra_override": "Hydra rejected an override",
    "argparse": "the train script rejected its command line",
    "missing_module": "a module the trainer imports is not there",
    "missing_file": "a file the config names is not there",
    "no_cuda": "the trainer asks for a GPU that its torch or this host cannot give it",
    "not_executable": "the job's program cannot be executed",
    "missing_program": "the job's program (or the interpreter its #! line names) is not there",
}


@dataclass(frozen=True)
class ConfigFault:
    """The line that says the trainer cannot run as configured, and the config key that has to change."""

    kind: str  # one of KINDS
    line: str  # the trainer's own words
    key: str  # the config key to fix (a [[jobs]] key; "environment.X" for an environment variable)
    subject: str | None = None  # what the line names: the override, the flag, the module, the file

    @property
    def what(self) -> str:
        return _WHAT[self.kind]

    def fix(self, job: str) -> str:
        """What the operator changes, in a clause."""
        where = f"in the [[jobs]] table of {job}"
        if self.kind == "unknown_task":
            return (f"set `task` {where} to a task this trainer registers (`isaacd check-config` names the closest "
                    "one)")
        if self.kind == "unknown_agent":
            return f"set `{self.key}` {where} to one the line names"
        if self.key == "isaaclab_version":  # the rejected flag or override is one isaacd itself passed
            return (f"`{self.subject}` is one isaacd passes for the Isaac Lab contract it detected: if this job runs "
                    f"another Isaac Lab, set `isaaclab_version` (or `train_script`) {where}")
        if self.kind in ("hydra_override", "argparse"):
            return f"correct or remove `{self.subject}` in `extra_args` {where}"
        if self.kind == "no_cuda":
            return _no_cuda_fix(self, where)
        if self.kind in ("not_executable", "missing_program"):
            return (f"make `{self.subject}` (and the #! interpreter it names, and every directory above them) "
                    f"{'executable' if self.kind == 'not_executable' else 'exist'} for the job's user "
                    f"(`isaacd doctor` checks), or point `{self.key}` {where} at "
                    f"{'a Python' if self.key == 'launcher' else 'a program'} they may run")
        if self.kind == "missing_module":
            if self.key == "launcher":
                return (f"install `{self.subject}` into the job's Python, or point `launcher` {where} at the Python "
                        "that has it")
            return f"correct `{self.subject}` in `{self.key}` {where}, or install the module it names"
        return f"correct `{self.subject}` in `{self.key}` {where}, or create the file"


def _no_cuda_fix(fault: ConfigFault, where: str) -> str:
    if fault.key.startswith("environment."):
        return f"remove or correct `{fault.key}` {where}: isaacd names the GPUs a job may use"
    if fault.subject in ("Cannot get CUDA generator without ATen_cuda library", "Torch not compiled with CUDA enabled"):
        return (f"the job's torch has no CUDA: train on the CPU with one rank (`device = \"cpu\"` and no `gpus` count "
                f"above 1 {where}: torchrun's ranks each take a GPU), or point `launcher` at a Python whose torch "
                "has CUDA")
    return (f"the trainer sees no such GPU: check `gpus` and `device` {where} against the GPUs this host has "
            "(`isaacd status`), or train on the CPU with one rank (`device = \"cpu\"`)")


def named_in_config(task: str, agent: str | None, extra_args: Sequence[str],
                    spare_preload: Sequence[str], environment: Mapping[str, str],
                    train_script: str | None) -> dict[str, list[str]]:
    """The job's config values a trainer's error could name, by key (what `find_config_fault` looks keys up in)."""
    named: dict[str, list[str]] = {"extra_args": list(extra_args), "task": [task]}
    if agent:
        named["agent"] = [agent]
    if spare_preload:
        named["spare_preload"] = list(spare_preload)
    if train_script:
        named["train_script"] = [train_script]
    for name, value in environment.items():
        named[f"environment.{name}"] = [value]
    return named


def find_config_fault(lines: Iterable[str], exit_code: int | None, named: Named) -> ConfigFault | None:
    """The error no restart can fix in a trainer's last output, or None when its decisive line is something else."""
    kept = [ln.strip() for ln in lines if ln.strip()]
    for i in range(len(kept) - 1, -1, -1):
        line = kept[i]
        fault = _match(line, exit_code, named)
        if fault is not None:
            if fault.line.startswith("Error parsing override") and i + 1 < len(kept) \
                    and not kept[i + 1].startswith("See https"):
                # Hydra says why on the next line ("missing EQUAL at '<EOF>'")
                fault = replace(fault, line=f"{fault.line}: {kept[i + 1]}")
            return fault
        if _OTHER.match(line):
            return None  # another exception ended it: a crash like any other
    return None


def _match(line: str, exit_code: int | None, named: Named) -> ConfigFault | None:
    if _GYM.match(line):
        return ConfigFault("unknown_task", line, "task", named.get("task", [None])[0])
    if m := _RL_CFG.match(line):
        return ConfigFault("unknown_agent", line, "agent" if named.get("agent") else "workflow", m.group("s"))
    if _AGENT_CFG.match(line):
        return ConfigFault("unknown_agent", line, "agent" if named.get("agent") else "workflow")
    if m := _HYDRA.match(line):
        subject = next((g for g in m.groups() if g), line)
        return ConfigFault("hydra_override", line, _passed_key(subject, named), subject)
    if exit_code == 2 and (m := _ARGPARSE.match(line)):
        s = _ARG_SUBJECT.match(m.group("msg"))
        subject = next((g for g in s.groups() if g), None) if s else None
        key = _passed_key(subject, named) if subject else "extra_args"
        return ConfigFault("argparse", line, key, subject or m.group("msg"))
    if (m := _MODULE.match(line)) or (m := _CALLABLE.match(line)):
        subject = m.group("s")
        return ConfigFault("missing_module", line, _naming_key(subject, named) or "launcher", subject)
    if m := _NO_CUDA.match(line):
        key = "environment.CUDA_VISIBLE_DEVICES" if named.get("environment.CUDA_VISIBLE_DEVICES") else "device"
        return ConfigFault("no_cuda", line, key, m.group("s"))
    if (m := _BAD_INTERPRETER.match(line)) or (exit_code in (126, 127) and (m := _SHELL_EXEC.match(line))):
        kind = "not_executable" if m.group("why") == "Permission denied" else "missing_program"
        return ConfigFault(kind, line, "launcher", m.group("s"))
    if m := _FILE.match(line):
        path = m.group("a") or m.group("b")
        key = _naming_key(path, named, as_path=True)
        return ConfigFault("missing_file", line, key, path) if key else None
    return None


def _passed_key(subject: str, named: Named) -> str:
    """`extra_args` when the operator's extra_args hold the flag or override; else isaacd passed it itself."""
    bare = subject.lstrip("+~")
    for arg in named.get("extra_args", ()):
        if arg == subject or arg.lstrip("+~").split("=", 1)[0] == bare.split("=", 1)[0]:
            return "extra_args"
    return "isaaclab_version"


def _naming_key(subject: str, named: Named, as_path: bool = False) -> str | None:
    """The config key one of whose values names `subject` (a module: its top package as a word; a file: the path, or
    its name)."""
    if as_path:
        wanted = (subject, PurePath(subject).name)
        found = lambda v: any(w and w in v for w in wanted)  # noqa: E731
    else:
        top = re.escape(subject.split(":")[0].split(".")[0])
        word = re.compile(rf"(?<![\w.]){top}(?![\w])")
        found = lambda v: bool(word.search(v))  # noqa: E731
    for key, values in named.items():
        if key == "task":  # Isaac Lab looks only the part after a "module:" up (parse_cfg.py:66)
            continue
        if any(found(v) for v in values):
            return key
    return None
