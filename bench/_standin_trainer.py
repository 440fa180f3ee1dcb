#!/usr/bin/env python3
"""A cheap trainer stand-in for supervisor benchmarks: looks alive to isaacd, costs ~nothing.

Run as a job's `command`; it gets the builtin (rsl_rl) workflow's flags and acts on two of them:
`--experiment_name E --run_name J` -> it creates `logs/rsl_rl/E/<YYYY-mm-dd_HH-MM-SS>_J/` in its cwd
(isaacd's workdir, whose logs/ is the job's log_root; the run-dir layout isaacd finds without the shim)
and appends one rsl_rl-like iteration of scalars (losses, reward, fps, episode length, noise std) to a
TensorBoard event file there every `STANDIN_PERIOD` seconds (default 0.5), in TFRecord framing with
masked CRC32C, as TensorBoard's EventFileWriter writes it. The reward rises and the losses fall with a
little noise, so no training watchdog trips. Stdlib only; SIGINT/SIGTERM -> exit 0.
"""

from __future__ import annotations

import math
import os
import random
import signal
import socket
import struct
import sys
import time


def _crc32c_table() -> list[int]:
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_T = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c = _T[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num: int, wire: int, payload: bytes) -> bytes:
    return varint(num << 3 | wire) + payload


def event(wall: float, step: int | None = None, scalars: dict[str, float] | None = None,
          file_version: str | None = None) -> bytes:
    msg = field(1, 1, struct.pack("<d", wall))  # wall_time: double
    if step is not None:
        msg += field(2, 0, varint(step))  # step: int64
    if file_version is not None:
        v = file_version.encode()
        msg += field(3, 2, varint(len(v)) + v)
    if scalars:
        summary = b""
        for tag, val in scalars.items():
            t = tag.encode()
            value = field(1, 2, varint(len(t)) + t) + field(2, 5, struct.pack("<f", val))  # tag, simple_value
            summary += field(1, 2, varint(len(value)) + value)
        msg += field(5, 2, varint(len(summary)) + summary)  # Event.summary
    return msg


def record(data: bytes) -> bytes:
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked(n)) + data + struct.pack("<I", masked(data))


def main() -> int:
    argv = sys.argv[1:]

    def flag(name: str, default: str) -> str:
        return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else default

    exp, run = flag("--experiment_name", "standin"), flag("--run_name", "standin")
    period = float(os.environ.get("STANDIN_PERIOD", "0.5"))
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    run_dir = os.path.join("logs", "rsl_rl", exp, time.strftime("%Y-%m-%d_%H-%M-%S") + "_" + run)
    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.0")
    rng = random.Random(os.getpid())
    with open(path, "ab", buffering=0) as fh:
        fh.write(record(event(time.time(), file_version="brain.Event:2")))
        it = 0
        while not stop:
            x = it / 200.0
            fh.write(record(event(time.time(), it, {
                "Loss/value_function": 1.0 * math.exp(-x) + 0.05 * rng.random(),
                "Loss/surrogate": -0.01 * math.exp(-x) + 0.002 * rng.random(),
                "Loss/entropy": 1.0 - 0.3 * (1 - math.exp(-x)) + 0.01 * rng.random(),
                "Loss/learning_rate": 1e-3,
                "Policy/mean_noise_std": 1.0 - 0.5 * (1 - math.exp(-x)),
                "Perf/total_fps": 50000.0 + 1000 * rng.random(),
                "Perf/collection time": 0.1, "Perf/learning_time": 0.05,
                "Train/mean_reward": 100.0 * (1 - math.exp(-x)) + rng.random(),
                "Train/mean_episode_length": 200.0 * (1 - math.exp(-x)) + rng.random(),
            })))
            it += 1
            deadline = time.monotonic() + period
            while not stop and time.monotonic() < deadline:
                time.sleep(min(0.1, period))
    return 0


if __name__ == "__main__":
    sys.exit(main())
