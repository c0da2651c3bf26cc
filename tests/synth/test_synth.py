"""The synthetic writer is schema-faithful: every header generation reads back, passes every
self-check and fingerprints like the others. Also P17, P18, P19 on synthetic captures."""
import pytest

from perfgate import terms
from perfgate.compare import compare_fingerprints
from perfgate.errors import InvalidCaptureError
from perfgate.app.gate import check, save_baseline
from perfgate.ingest import load_capture
from perfgate.metrics.fingerprint import fingerprint_capture
from perfgate.store.baselines import BaselineStore
from perfgate.synth import SynthSpec, write_capture
from perfgate.synth.writer import HEADERS


@pytest.mark.parametrize("header", sorted(HEADERS))
def test_every_generation_passes_self_checks(tmp_path, policy, header):
    root = write_capture(tmp_path / header, SynthSpec(header=header, ranks=2, steps=2))
    fp = fingerprint_capture(load_capture(root), policy)
    statuses = {c.status for c in fp.self_checks}
    assert statuses == {"pass"}, [c.message for c in fp.self_checks if c.status != "pass"]
    assert len([c for c in fp.self_checks if c.name == "comm_equality"]) == 4  # 2 ranks x 2 steps
    assert fp.metrics["kernel.total_calls_per_step{view=p50}"].value == 71
    assert fp.metrics["step.count{view=rank0}"].value == 2


def test_same_spec_other_seed_is_unchanged(tmp_path, policy):
    a = fingerprint_capture(load_capture(write_capture(tmp_path / "a", SynthSpec(seed=1))), policy)
    b = fingerprint_capture(load_capture(write_capture(tmp_path / "b", SynthSpec(seed=9))), policy)
    cmps, _ = compare_fingerprints(a, b, policy)
    assert not [c.key for c in cmps if c.fails]


def test_generation_change_keeps_counts_comparable(tmp_path, policy):
    """G07-like: header generation change (Block Dim -> Device_id/COMMUNICATION) still gates counts."""
    a = fingerprint_capture(load_capture(write_capture(tmp_path / "a", SynthSpec(header="g2025_l1"))), policy)
    b = fingerprint_capture(load_capture(write_capture(tmp_path / "b", SynthSpec(header="g83"))), policy)
    cmps, notes = compare_fingerprints(a, b, policy)
    assert not [c.key for c in cmps if c.fails]
    assert any("kernel table format (export / header) changed" in n for n in notes)
    comm = {c.key: c for c in cmps}["share.core_type{core_type=COMMUNICATION,view=rank0}"]
    assert comm.verdict == terms.UNCHANGED  # HCCL and COMMUNICATION are one core type


def test_cross_rank_uses_durations_only_p17(tmp_path, policy):
    """Ranks 11.5 s apart in absolute time: cross-rank views come from per-rank durations."""
    fp = fingerprint_capture(load_capture(write_capture(tmp_path / "a", SynthSpec(ranks=4))), policy)
    st = fp.metrics["step.time_us{view=max}"].value
    assert st < 20_000  # microseconds of one step, not seconds of clock skew
    assert fp.metrics["step.time_us{view=p50}"].value <= st


def test_unknown_core_is_reported_p19(tmp_path, policy):
    root = write_capture(tmp_path / "a", SynthSpec(ranks=1, steps=1))
    kd = root / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    kd.write_text(kd.read_text().replace(",AI_CPU,", ",FUTURE_CORE,"))
    fp = fingerprint_capture(load_capture(root), policy)
    assert "share.category{category=unknown,view=rank0}" in fp.metrics
    assert fp.metrics["share.core_type{core_type=FUTURE_CORE,view=rank0}"].value > 0
    assert any("'unknown' bucket" in w and "FUTURE_CORE" in w for w in fp.warnings)


def test_partial_capture_cannot_become_baseline_p18(tmp_path, policy):
    """rank0 with steps, rank1 whose rows are all outside any step -> refused as baseline."""
    root = write_capture(tmp_path / "a", SynthSpec(ranks=2, steps=3))
    kd = root / "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    lines = kd.read_text().splitlines()
    kd.write_text("\n".join([lines[0]] + [line[line.index(","):] for line in lines[1:] if line]) + "\n")
    store = BaselineStore(tmp_path / "bl")
    with pytest.raises(InvalidCaptureError, match="steps_present failed on rank 1") as e:
        save_baseline(root, "main", policy=policy, store=store, env={})
    assert "blank Step Id" in e.value.message and "partial capture" in e.value.message
    assert not (tmp_path / "bl" / "main.json").exists()


def test_step_count_mismatch_is_noted(tmp_path, policy):
    store = BaselineStore(tmp_path / "bl")
    save_baseline(write_capture(tmp_path / "a", SynthSpec(steps=5)), "main", policy=policy, store=store, env={})
    r = check(write_capture(tmp_path / "b", SynthSpec(steps=2, seed=4)), "main", policy=policy, store=store, env={})
    assert any("step count differs" in n for n in r.notes)
    assert r.status == terms.PASS


def test_injected_slowdown_regresses_step_time_not_counts(tmp_path, policy):
    store = BaselineStore(tmp_path / "bl")
    save_baseline(write_capture(tmp_path / "a", SynthSpec(seed=1)), "main", policy=policy, store=store, env={})
    r = check(write_capture(tmp_path / "b", SynthSpec(
        seed=2, slowdown={"aclnnMatmul_MatMulV3Common_MatMulV3": 1.6})), "main", policy=policy, store=store, env={})
    failing = {c.name for c in r.comparisons if c.fails}
    assert "step.time_us" in failing and "kernel.calls_per_step" not in failing
    assert not any(c.name == "kernel.time_us" and c.gated for c in r.comparisons)  # never gated


def test_synth_and_demo_where_nothing_can_be_written_are_store_errors(tmp_path):
    """``synth OUT`` / ``demo --out OUT`` under a regular file (or a read-only folder, a full
    disk): exit 5 naming the path, not exit 70."""
    from click.testing import CliRunner

    from perfgate.cli import main
    (tmp_path / "afile").write_text("x")
    for args, where in ((["synth", str(tmp_path / "afile" / "sub")], "afile/sub"),
                        (["demo", "--out", str(tmp_path / "afile" / "demo")], "afile/demo/captures/baseline")):
        r = CliRunner().invoke(main, args, env={})
        assert r.exit_code == 5, r.output
        assert f"{where}: cannot write the synthetic capture: Not a directory" in r.output, r.output


def _ranks(root):
    return sorted(p.name for p in root.iterdir())


def test_synth_refuses_a_folder_holding_a_capture_and_overwrite_replaces_it_wholesale(tmp_path):
    """``synth OUT`` twice used to leave the first capture's extra rank folders (and its other
    header generation) beside the new ones: one mixed capture. A non-empty OUT is now exit 2
    and left as it was; ``--overwrite`` replaces an earlier capture wholesale; a folder holding
    more than rank folders is never replaced."""
    from click.testing import CliRunner

    from perfgate.cli import main
    run = lambda *a: CliRunner().invoke(main, ["synth", *map(str, a)], env={})
    out = tmp_path / "cap"
    assert run("--ranks", 4, out).exit_code == 0
    kd = out / "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
    before = kd.read_bytes()
    r = run("--ranks", 2, "--header", "g2023", out)
    assert r.exit_code == 2, r.output
    assert "the folder is not empty (rank0_ascend_pt/, rank1_ascend_pt/" in r.output and "--overwrite" in r.output
    assert _ranks(out) == [f"rank{i}_ascend_pt" for i in range(4)] and kd.read_bytes() == before
    r = run("--ranks", 2, "--header", "g2023", "--overwrite", out)
    assert r.exit_code == 0, r.output
    assert _ranks(out) == ["rank0_ascend_pt", "rank1_ascend_pt"]   # no stale rank2/rank3
    assert kd.read_text().startswith(HEADERS["g2023"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap"]   # no scratch folder left
    (out / "notes.txt").write_text("mine")
    r = run("--overwrite", out)
    assert r.exit_code == 2 and "refusing to replace this folder" in r.output and "notes.txt" in r.output
    assert (out / "notes.txt").read_text() == "mine" and kd.read_text().startswith(HEADERS["g2023"])
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(empty).exit_code == 0 and _ranks(empty) == ["rank0_ascend_pt", "rank1_ascend_pt"]


def test_synth_overwrite_that_fails_keeps_the_earlier_capture(tmp_path, monkeypatch):
    """A write failing half-way (here the second rank: a full disk) leaves the earlier capture
    exactly as it was, and no half-written new rank beside it (exit 5 naming OUT)."""
    from click.testing import CliRunner

    from perfgate.cli import main
    from perfgate.synth import writer
    out = tmp_path / "cap"
    write_capture(out, SynthSpec(ranks=3, steps=2, seed=5))
    files = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    real = writer._write_rank

    def full_disk(root, spec, rank, steps):
        if rank == 1:
            raise OSError(28, "No space left on device", str(root / "rank1_ascend_pt"))
        return real(root, spec, rank, steps)
    monkeypatch.setattr(writer, "_write_rank", full_disk)
    r = CliRunner().invoke(main, ["synth", "--overwrite", str(out)], env={})
    assert r.exit_code == 5 and f"{out}: cannot write the synthetic capture: No space left on device" in r.output
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files
    assert _ranks(out) == ["rank0_ascend_pt", "rank1_ascend_pt", "rank2_ascend_pt"]
    r = CliRunner().invoke(main, ["synth", str(tmp_path / "new")], env={})
    assert r.exit_code == 5 and not (tmp_path / "new").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap"]


def test_demo_again_replaces_its_captures(tmp_path):
    """A second ``demo`` over a folder whose baseline capture holds other rank folders (an
    earlier capture, a 4-rank synth) used to read the mix and stop (exit 2, 'use --force',
    an option demo has not); it replaces its two captures wholesale and exits 1 again."""
    from click.testing import CliRunner

    from perfgate.cli import main
    out = tmp_path / "demo"
    write_capture(out / "captures" / "baseline", SynthSpec(ranks=4))
    r = CliRunner().invoke(main, ["demo", "--out", str(out)], env={})
    assert r.exit_code == 1, r.output
    assert _ranks(out / "captures" / "baseline") == ["rank0_ascend_pt", "rank1_ascend_pt"]
    assert "REGRESSION" in r.output
