"""isaacd.gpu.assign: the one answer to "which GPUs does this job use?", for every spelling of gpus and
device, with and without the host's inventory."""

from __future__ import annotations

import dataclasses

import pytest
from metrics_fakes import fake_job, fake_status, rows
from prometheus_client.parser import text_string_to_metric_families

from isaacd.config.schema import JobConfig
from isaacd.gpu import GpuInfo, GpuMap, empty_snapshot
from isaacd.gpu.assign import (
    assigned_keys,
    cdi_devices,
    claim_refs,
    container_device,
    gpu_conflicts,
    job_gpu_indices,
    job_gpus,
    missing_gpus,
    normalize_ref,
    shared_gpus,
    status_gpus,
)
from isaacd.watchdogs.base import GpuReading

UUID0 = "GPU-00000000-0000-4000-8000-000000000000"
UUID1 = "GPU-11111111-1111-4111-8111-111111111111"
MIG01 = "MIG-0a0a0a0a-0000-4000-8000-000000000001"


def job(**kw) -> JobConfig:
    return JobConfig.model_validate({"name": "j", **kw})


def host() -> list[GpuInfo]:
    """GPU 0 split into MIG devices 0:1 and 0:2, plain GPU 1."""
    return [
        GpuInfo(0, UUID0, "H200", "0000:01:00.0"),
        GpuInfo(1, MIG01, "H200 MIG 1g", "0000:01:00.0", is_mig=True, parent_index=0),
        GpuInfo(2, "MIG-0a0a0a0a-0000-4000-8000-000000000002", "H200 MIG 1g", "0000:01:00.0", is_mig=True,
                parent_index=0),
        GpuInfo(1, UUID1, "H200", "0000:02:00.0"),
    ]


def snapshot(infos=None, up=True):
    infos = host() if infos is None else infos
    gpus = GpuMap({i.key: i for i in infos}, {i.uuid: i.key for i in infos})
    return dataclasses.replace(empty_snapshot(), up=up, reason=None if up else "no NVML", gpus=gpus)


# ---- the claim, from the config alone ------------------------------------------------------------
CLAIMS = [
    ({}, None, ()),  # device = "cpu" by default
    ({"device": "cpu"}, None, ()),
    ({"device": "cuda"}, "device", ("0",)),  # CUDA's default device
    ({"device": "cuda:0"}, "device", ("0",)),
    ({"device": "cuda:3"}, "device", ("3",)),
    ({"device": "cuda", "nproc_per_node": 3}, "nproc_per_node", ("0", "1", "2")),  # rank r on cuda:r
    ({"device": "cuda:5", "nproc_per_node": 2}, "nproc_per_node", ("0", "1")),
    ({"nproc_per_node": 2}, None, ()),  # device unset: cpu (device = "cpu" written with 2 ranks is refused)
    ({"gpus": "all"}, "gpus", ("all",)),
    ({"gpus": [2, 0]}, "gpus", ("2", "0")),
    ({"gpus": [1], "device": "cuda:1"}, "gpus", ("1",)),
    ({"gpus": [1, 2], "device": "cuda"}, "gpus", ("1", "2")),  # gpus wins; device picks within them
    ({"gpus": ["GPU-ABCDEF01-0000-4000-8000-00000000000A"]}, "gpus", ("GPU-abcdef01-0000-4000-8000-00000000000a",)),
    ({"gpus": [MIG01.upper()]}, "gpus", (MIG01,)),
    ({"gpus": ["0:1"]}, "gpus", ("0:1",)),
    ({"gpus": ["nvidia.com/gpu=3"]}, "gpus", ("3",)),
    ({"gpus": ["nvidia.com/gpu=all"]}, "gpus", ("all",)),
    ({"gpus": ["example.com/accel=x1"]}, "gpus", ("example.com/accel=x1",)),
]


@pytest.mark.parametrize("kw,key,refs", CLAIMS)
def test_claim_of_every_spelling_without_an_inventory(kw, key, refs):
    claim = job_gpus(job(**kw))
    assert (claim.key, claim.refs) == (key, refs) and claim_refs(job(**kw)) == (key, refs)
    assert not claim.inventory_known and claim.devices == () and claim.missing == ()
    assert bool(claim) == bool(refs) and claim.all == ("all" in refs)


def test_physical_indices_from_spelling():
    assert job_gpus(job(device="cuda:3")).physical_indices == {3}
    assert job_gpus(job(gpus=["0:1", 2])).physical_indices == {0, 2}
    assert job_gpus(job(gpus=[UUID1])).physical_indices == set()  # a UUID cannot be placed without the host


def test_normalize_ref():
    assert normalize_ref(0) == "0" and normalize_ref(" 1 ") == "1" and normalize_ref("nvidia.com/gpu=0:1") == "0:1"
    assert normalize_ref("gpu-AB") == "GPU-ab"
    with pytest.raises(TypeError):
        normalize_ref(True)


# ---- with the host's inventory -------------------------------------------------------------------
def test_inventory_resolves_every_spelling():
    snap = snapshot()
    assert job_gpus(job(device="cuda:1"), snap).keys == ["1"]
    assert job_gpus(job(device="cuda"), snap).keys == ["0", "0:1", "0:2"]  # a physical GPU brings its MIG devices
    assert job_gpus(job(gpus=[UUID1.upper()]), snap).keys == ["1"]
    assert job_gpus(job(gpus=[MIG01]), snap).keys == ["0:1"]
    assert job_gpus(job(gpus=["0:2"]), snap).keys == ["0:2"]
    assert job_gpus(job(gpus=["nvidia.com/gpu=1"]), snap).keys == ["1"]
    assert job_gpus(job(gpus="all"), snap).keys == ["0", "0:1", "0:2", "1"]
    assert job_gpus(job(gpus=["MIG-0a0a0a0a-0000-4000-8000-000000000002"]), snap).physical_indices == {0}
    opaque = job_gpus(job(gpus=["example.com/accel=x1"]), snap)
    assert opaque.keys == [] and opaque.missing == ()  # isaacd cannot see it: never "missing"
    gone = job_gpus(job(gpus=[1, 7, "GPU-deadbeef-0000-4000-8000-000000000000"]), snap)
    assert gone.inventory_known and gone.keys == ["1"]
    assert gone.missing == ("7", "GPU-deadbeef-0000-4000-8000-000000000000")
    assert job_gpus(job(device="cpu"), snap).keys == []


@pytest.mark.parametrize("inventory", [None, snapshot(up=False), snapshot(infos=[]), [], {}])
def test_an_unknown_inventory_is_no_inventory(inventory):
    claim = job_gpus(job(gpus=[7]), inventory)
    assert not claim.inventory_known and claim.refs == ("7",) and claim.missing == ()


def test_inventory_as_mapping_or_list():
    assert job_gpus(job(gpus=[UUID1]), host()).keys == ["1"]
    assert job_gpus(job(gpus=[UUID1]), snapshot().gpus).keys == ["1"]


# ---- overlaps ---------------------------------------------------------------------------------------
def test_index_and_uuid_of_one_gpu_collide_only_with_the_inventory():
    a, b = job(name="a", gpus=[1]), job(name="b", gpus=[UUID1])
    assert shared_gpus(job_gpus(a), job_gpus(b)) == []
    assert shared_gpus(job_gpus(a, snapshot()), job_gpus(b, snapshot())) == ["1"]
    (c,) = gpu_conflicts([a, b], snapshot())
    assert (c.first_name, c.second_name, c.first_key, c.second_key, c.gpus) == ("a", "b", "gpus", "gpus", ("1",))
    assert gpu_conflicts([a, b]) == []


def test_mig_overlaps():
    snap = snapshot()
    whole, mig1, mig2 = job(gpus=[0]), job(gpus=["0:1"]), job(gpus=["MIG-0a0a0a0a-0000-4000-8000-000000000002"])
    assert shared_gpus(job_gpus(whole), job_gpus(mig1)) == ["0:1"]
    assert shared_gpus(job_gpus(mig1), job_gpus(job(gpus=["0:2"]))) == []
    assert shared_gpus(job_gpus(whole, snap), job_gpus(mig2, snap)) == ["0:2"]
    assert shared_gpus(job_gpus(mig1, snap), job_gpus(mig2, snap)) == []


def test_all_overlaps_every_gpu_claim_but_not_cpu_or_opaque_cdi():
    every = job_gpus(job(gpus="all"))
    assert shared_gpus(every, job_gpus(job(device="cuda:4"))) == ["4"]
    assert shared_gpus(job_gpus(job(device="cuda:4")), every) == ["4"]
    assert shared_gpus(every, job_gpus(job(gpus="all"))) == ["all GPUs"]
    assert shared_gpus(every, job_gpus(job())) == []
    assert shared_gpus(every, job_gpus(job(gpus=["example.com/accel=x1"]))) == []
    same = job_gpus(job(gpus=["example.com/accel=x1"]))
    assert shared_gpus(same, same) == ["example.com/accel=x1"]


def test_share_gpus_needs_both_jobs():
    a = job(name="a", device="cuda:0", share_gpus=True)
    assert gpu_conflicts([a, job(name="b", device="cuda")]) != []
    assert gpu_conflicts([a, job(name="b", device="cuda", share_gpus=True)]) == []


# ---- the launch check ------------------------------------------------------------------------------
def test_missing_gpus():
    snap = snapshot()
    assert missing_gpus(job(device="cuda:1"), snap) is None
    assert missing_gpus(job(gpus=[UUID0, "0:2"]), snap) is None
    msg = missing_gpus(job(device="cuda:4"), snap)
    assert msg is not None and msg.startswith("GPU 4 is not on this host (GPUs here: 0 (GPU-0000") and "fix the job's device" in msg
    msg = missing_gpus(job(gpus=[1, "GPU-deadbeef-0000-4000-8000-000000000000"]), snap)
    assert msg is not None and msg.startswith("GPU GPU-deadbeef-0000-4000-8000-000000000000 is not") and "gpus" in msg
    assert missing_gpus(job(device="cuda", nproc_per_node=3), snap) is not None  # ranks on cuda:0..2; no GPU 2
    assert missing_gpus(job(gpus=["example.com/accel=x1"]), snap) is None
    assert missing_gpus(job(device="cuda:4"), snapshot(up=False)) is None  # collector down: unknown, not refused
    assert missing_gpus(job(), snap) is None


# ---- the watchdogs ---------------------------------------------------------------------------------
def readings():
    return [GpuReading(index=0, uuid=UUID0), GpuReading(index=1, uuid=UUID1)]


def test_job_gpu_indices_for_the_watchdogs():
    r = readings()
    assert job_gpu_indices(job(device="cuda"), r, {}, []) == {0}  # the engine and CDI now agree: GPU 0
    assert job_gpu_indices(job(device="cuda:1"), r, {}, []) == {1}
    assert job_gpu_indices(job(gpus=[UUID1]), r, {}, []) == {1}
    assert job_gpu_indices(job(gpus="all"), r, {}, []) == {0, 1}
    assert job_gpu_indices(job(gpus=["0:1"]), r, {}, []) == {0}  # a MIG device counts for its parent
    assert job_gpu_indices(job(gpus=[MIG01]), r, {}, []) == set()  # a MIG UUID needs the inventory ...
    assert job_gpu_indices(job(gpus=[MIG01]), r, {}, [], inventory=snapshot()) == {0}  # ... to be placed
    assert job_gpu_indices(job(gpus=[3]), r, {}, []) == {3}  # not on this host: still the claim
    assert job_gpu_indices(job(), r, {1: {42, 43}}, [43]) == {1}  # a CPU job seen on GPU 1 is watched there
    assert job_gpu_indices(job(device="cuda"), r, {1: {7}}, [8]) == {0}
    assert job_gpu_indices(job(gpus="all"), [], {}, []) == set()


# ---- containers ---------------------------------------------------------------------------------------
CDI = [
    ({}, []),
    ({"device": "cuda"}, ["nvidia.com/gpu=0"]),
    ({"device": "cuda:2"}, ["nvidia.com/gpu=2"]),
    ({"device": "cuda", "nproc_per_node": 2}, ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]),
    ({"gpus": "all"}, ["nvidia.com/gpu=all"]),
    ({"gpus": [2, 3], "device": "cuda:2"}, ["nvidia.com/gpu=2", "nvidia.com/gpu=3"]),
    ({"gpus": [UUID1, "0:1", "nvidia.com/gpu=1"]}, [f"nvidia.com/gpu={UUID1}", "nvidia.com/gpu=0:1",
                                                    "nvidia.com/gpu=1"]),
    ({"gpus": ["example.com/accel=x1"]}, ["example.com/accel=x1"]),
]


@pytest.mark.parametrize("kw,names", CDI)
def test_cdi_devices_are_the_claim(kw, names):
    assert cdi_devices(job(**kw)) == names


def test_cdi_name_starting_with_dash_is_refused():
    unchecked = job().model_copy(update={"gpus": ["-0"]})  # the config refuses it too
    with pytest.raises(ValueError, match="cannot start with '-'"):
        cdi_devices(unchecked)


@pytest.mark.parametrize("kw,inside", [
    ({"device": "cpu"}, "cpu"),
    ({"device": "cuda"}, "cuda"),
    ({"device": "cuda:2"}, "cuda:0"),  # CDI passes GPU 2 alone
    ({"device": "cuda:2", "gpus": [3, 2]}, "cuda:0"),  # PCI (index) order inside
    ({"device": "cuda:3", "gpus": [3, 2]}, "cuda:1"),
    ({"device": "cuda:1", "gpus": [2, 3]}, "cuda:1"),  # names no listed index: already counted inside
    ({"device": "cuda:1", "gpus": "all"}, "cuda:1"),
    ({"device": "cuda:0", "gpus": [UUID1]}, "cuda:0"),
])
def test_container_device(kw, inside):
    assert container_device(job(**kw)) == inside


# ---- status and metrics --------------------------------------------------------------------------
def test_status_gpus_and_assigned_keys():
    assert status_gpus(job(device="cuda:1")) == ["1"] and status_gpus(job(gpus="all")) == "all"
    assert status_gpus(job()) == []
    snap = snapshot()
    assert assigned_keys("all", snap) == ["0", "0:1", "0:2", "1"]
    assert assigned_keys("all", None) == ["all"] and assigned_keys("all", snapshot(up=False)) == ["all"]
    assert assigned_keys([0, UUID1, "0:1", 9], snap) == ["0", "1", "0:1", "9"]
    assert assigned_keys([0, UUID1], None) == ["0", UUID1]
    assert assigned_keys(None, snap) == [] and assigned_keys([], snap) == []


def test_job_gpu_assigned_metric_for_all_gpus():
    from isaacd.metrics import build_registry
    from prometheus_client import generate_latest

    status = fake_status([fake_job("every", gpus="all"), fake_job("one", gpus=[UUID1])])
    text = generate_latest(build_registry(lambda: status, snapshot, process_metrics=False)).decode()
    got = sorted((s.labels["job"], s.labels["gpu"]) for fam in text_string_to_metric_families(text)
                 for s in fam.samples if s.name == "isaacd_job_gpu_assigned")
    # before: "all" was iterated letter by letter (gpu="a", "l", "l")
    assert got == [("every", "0"), ("every", "0:1"), ("every", "0:2"), ("every", "1"), ("one", "1")]


def test_gpu_status_names_the_jobs_assigned_to_each_gpu():
    from isaacd.metrics import gpu_status

    st = gpu_status(snapshot(), rows([fake_job("every", pids=[], gpus="all"), fake_job("one", pids=[], gpus=[UUID1]),
                                      fake_job("cpu", pids=[], gpus=[])])).to_json()
    assert {d["index"]: d["assigned"] for d in st["devices"]} == {
        "0": ["every"], "0:1": ["every"], "0:2": ["every"], "1": ["every", "one"]}
