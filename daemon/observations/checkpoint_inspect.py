"""Look inside a torch checkpoint without torch: top-level keys, `iter`, and finite tensors.

The daemon never imports torch (a GiB of import, and the wrong CUDA on the host), yet a resume
must never pick a checkpoint the trainer cannot load: rsl_rl 2.x/3.x write `model_state_dict`,
4.x/5.x write `actor_state_dict` + `critic_state_dict`, and neither loads the other. A torch
checkpoint is a zip holding `data.pkl` (a pickle whose tensors point at storages by key) and one
raw little-endian file per storage. So: unpickle with an Unpickler that builds *stubs* for every
class (nothing from the file is ever executed), then read the float storages with numpy.
"""

from __future__ import annotations

import collections
import io
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# storage class name -> numpy dtype; bfloat16 has none and is widened below
_FLOAT_STORAGES = {"FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2", "BFloat16Storage": "bf16"}

RSL_RL_4 = "rsl_rl 4.x/5.x (actor_state_dict + critic_state_dict)"
RSL_RL_2 = "rsl_rl 2.x/3.x (model_state_dict)"


@dataclass(frozen=True)
class _StorageRef:
    kind: str  # "FloatStorage", ...
    key: str
    numel: int


@dataclass
class _TensorRef:
    storage: _StorageRef
    size: tuple[int, ...]


class _Opaque:
    """Stands in for any class the pickle names: accepts every way pickle builds objects."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "_Opaque":
        return object.__new__(cls)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args = args

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __call__(self, *args: Any, **kwargs: Any) -> "_Opaque":
        return _Opaque()  # e.g. getattr(obj, "name")(): a stand-in for the result, nothing runs


class _StorageType:
    def __init__(self, name: str):
        self.name = name


def _rebuild_tensor(storage: Any, offset: int = 0, size: Any = (), *rest: Any) -> Any:
    return _TensorRef(storage, tuple(size)) if isinstance(storage, _StorageRef) else _Opaque()


def _rebuild_parameter(data: Any, *rest: Any) -> Any:
    return data


class _StubUnpickler(pickle.Unpickler):
    _SAFE_BUILTINS = {"set", "frozenset", "complex", "slice", "range", "bytearray"}

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - pickle API
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "builtins" and name in self._SAFE_BUILTINS:
            return getattr(__import__("builtins"), name)
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor", "_rebuild_tensor_v3"):
            return _rebuild_tensor
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "torch" and name.endswith("Storage"):
            return _StorageType(name)
        return type(name, (_Opaque,), {"__module__": "isaacd.stub." + module})

    def persistent_load(self, pid: Any) -> Any:  # noqa: D102 - pickle API
        if isinstance(pid, tuple) and pid and pid[0] == "storage" and len(pid) >= 5:
            kind = pid[1].name if isinstance(pid[1], _StorageType) else str(pid[1])
            return _StorageRef(kind, str(pid[2]), int(pid[4]))
        return _Opaque()


@dataclass
class CheckpointInfo:
    keys: list[str]
    iteration: int | None
    nonfinite: list[str] = field(default_factory=list)  # top-level keys holding a NaN/inf tensor

    @property
    def rsl_rl_format(self) -> str | None:
        if "actor_state_dict" in self.keys:
            return RSL_RL_4
        if "model_state_dict" in self.keys:
            return RSL_RL_2
        return None


class InspectError(Exception):
    pass


def inspect_checkpoint(path: Path) -> CheckpointInfo:
    """Read a torch zip checkpoint; raises InspectError with a sentence saying what is wrong."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            pkl = next((n for n in names if n == "data.pkl" or n.endswith("/data.pkl")), None)
            if pkl is None:
                raise InspectError("no data.pkl: not a torch checkpoint")
            prefix = pkl[: -len("data.pkl")]
            try:
                obj = _StubUnpickler(io.BytesIO(zf.read(pkl))).load()
            except Exception as exc:  # noqa: BLE001 - any malformed pickle is "unreadable"
                raise InspectError(f"data.pkl does not unpickle: {type(exc).__name__}: {exc}") from None
            if not isinstance(obj, dict):
                raise InspectError(f"holds a {type(obj).__name__}, not a dict of state")
            nonfinite = [str(k) for k, v in obj.items() if _has_nonfinite(v, zf, prefix)]
    except zipfile.BadZipFile as exc:
        raise InspectError(f"not a complete zip archive: {exc}") from None
    except OSError as exc:
        raise InspectError(f"cannot read: {exc.strerror or exc}") from None
    it = obj.get("iter", obj.get("epoch"))
    return CheckpointInfo(keys=sorted(str(k) for k in obj), iteration=it if isinstance(it, int) else None,
                          nonfinite=nonfinite)


def _tensors(value: Any) -> list[_TensorRef]:
    out: list[_TensorRef] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, _TensorRef):
            out.append(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return out


def _has_nonfinite(value: Any, zf: zipfile.ZipFile, prefix: str) -> bool:
    seen: set[str] = set()
    for t in _tensors(value):
        ref = t.storage
        dtype = _FLOAT_STORAGES.get(ref.kind)
        if dtype is None or ref.key in seen:
            continue
        seen.add(ref.key)
        raw = zf.read(f"{prefix}data/{ref.key}")
        if dtype == "bf16":
            arr = (np.frombuffer(raw, dtype="<u2").astype("<u4") << 16).view("<f4")
        else:
            arr = np.frombuffer(raw, dtype=dtype)
        if not np.isfinite(arr).all():
            return True
    return False
