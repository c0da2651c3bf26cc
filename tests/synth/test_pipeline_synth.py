"""The synthetic writer's pipeline-parallel job: stages of consecutive ranks running their own
kernels, the layout torch_npu records for Megatron / MindSpeed, every self-check passing."""
from __future__ import annotations

import csv
import json

from perfgate.ingest import load_capture
from perfgate.metrics.fingerprint import failed_checks, fingerprint_capture
from perfgate.policy import load_policy
from perfgate.synth import pipeline_spec, write_capture
from perfgate.synth.writer import PIPELINE_STAGE_FAMILIES


def _families(cap, rank):
    with open(cap / f"rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv", newline="") as f:
        return {row["Name"] for row in csv.DictReader(f) if not row["Name"].startswith("hcom_")}


def test_pipeline_job_has_two_stages_of_two_data_parallel_ranks(tmp_path):
    spec = pipeline_spec()
    assert spec.ranks == 4 and [spec.stage_of(r) for r in range(4)] == [0, 0, 1, 1]
    cap = write_capture(tmp_path / "cap", spec)
    stage0, stage1 = ({f[0] for f in fams} for fams in PIPELINE_STAGE_FAMILIES)
    assert _families(cap, 0) == _families(cap, 1) == stage0
    assert _families(cap, 2) == _families(cap, 3) == stage1
    assert stage0 != stage1
    meta = json.loads((cap / "rank3_ascend_pt/profiler_metadata.json").read_text())
    assert meta["distributed_args"]["pipeline_model_parallel_size"] == 2
    pp = [g for g in meta["parallel_group_info"].values() if g["group_name"] == "pp"]
    assert pp == [{"group_name": "pp", "group_rank": 1, "global_ranks": [1, 3]}]
    fp = fingerprint_capture(load_capture(cap), load_policy())
    assert not failed_checks(fp)
    assert fp.config["job_world_size"] == 4


def test_without_stage_families_nothing_changes(tmp_path):
    """The default spec writes no profiler_metadata.json and every rank runs ``families``."""
    from perfgate.synth import SynthSpec
    spec = SynthSpec(ranks=2)
    assert spec.families_of(1) == spec.families and spec.stage_of(1) == 0
    cap = write_capture(tmp_path / "cap", spec)
    assert not list(cap.glob("*/profiler_metadata.json"))
