"""Pipeline stages: which ranks of a capture run the same program, and the cross-rank views
within each stage.

In a pipeline-parallel job each stage runs other layers (the first the embedding, the last the
output layer and the loss) and other kernels; its data-parallel (and tensor-parallel) ranks run the
same program. A median over every rank then describes no rank: e.g. two stages with 230k and 400k us
of Computing per step have a pooled "p50" of 315k. So the ranks are grouped by stage and, with more than one
stage, the pooled ``p50`` / ``max`` views (and the rank skew) are replaced by the same views within
each stage, ``stage<S>.p50`` / ``stage<S>.max`` (reports say "stage 1 p50"); ``rank0`` stays the
lowest rank's own value. A capture with one stage keeps the pooled views, unchanged.

Where one job-level number is wanted for a p50 (the tuning journal's key metric, the sweep's
columns, the HTML report's p50 charts, the workload test's family shares), :func:`job_p50` gives
it: the pooled p50 when there is one, else the largest stage p50 (the step of a pipeline ends when
its slowest stage ends), with the stage it came from.

The stage of a rank is found, in this order:

1. **Parallel layout** (``LAYOUT``), where every rank records it: the rank's position
   (``group_rank``) in its pipeline group, the ``parallel_group_info`` entry whose
   ``group_name`` is ``pp`` in ``profiler_metadata.json`` (torch_npu writes the groups; Megatron /
   MindSpeed name the pipeline group ``pp``). Partial ranks (no kernel table) are placed too.
2. **Kernel signature** (``SIGNATURE``) otherwise. The signature of a rank is the set

       F = { compute kernel family f : n(f) ≥ 1 }

   with ``n(f)`` the family's calls per step (``kernel.calls_per_step``: the lower median over
   the rank's steps, an observed count); communication families (``hcom_*`` / HCCL) are left
   out, their names carry the group and the peer. Two ranks run the same program when
   ``F_a = F_b``. Names, not times: device speed and jitter do not move it, and data-parallel
   ranks run the same families. A family seen in fewer than half the steps (a recompile) is not
   in ``F``. The calls per family are left out on purpose: a candidate that calls a kernel
   more often on some ranks (the count regressions the gate is there to catch) must stay one
   program with its data-parallel peers, not become a stage of its own. Pipeline stages differ
   in their families: the first stage runs the embedding, the last the output layer and the loss.
   Ranks are grouped by signature digest, and the groups are taken as stages only when they
   look like pipeline stages of D data-parallel ranks each: every group holds a multiple of the
   smallest group's rank count, and that count is at least 2 (middle stages that run the same
   families are one program and form one group of k x D ranks, so a 4-stage job gives groups of
   D, 2D and D ranks). Otherwise the capture keeps the pooled views: a rank whose kernels differ from its
   peers' alone (a kernel only some ranks run, as in data-dependent or per-rank synthetic
   programs) must not turn run-to-run variation into a changed stage layout. Limits: a capture
   of one rank per stage is not split by the signature, and middle stages that run the same
   families are pooled even when their layer counts differ; the recorded layout splits them.
   Ranks without a kernel table cannot be placed this way and are left out of the stage views
   (``unplaced``). Cost: read from the per-rank metrics already computed (one pass over each
   rank's family counts), no pass over kernel rows.

Stages are numbered by the layout's pipeline rank, else in order of their lowest rank id (the
stage holding rank 0 is stage 0). The fingerprint records the layout in ``config["stages"]``
(:meth:`StageLayout.to_config`) only when there is more than one stage.

Comparison (:func:`layout_change`): stage ``S`` of the baseline is compared with stage ``S`` of the
candidate when both sides have the same ranks in the same stages; a stage whose signature changed
(other kernels on that stage) is still paired by position, with a note. A changed layout (stages
gained, lost or regrouped) makes every cross-rank view except ``rank0`` incomparable, with the
reason.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from perfgate import terms
from perfgate.model import metric_key, parse_metric_key

#: a communication kernel family (as :data:`perfgate.compare.attribution.COMM_FAMILY`)
COMM_FAMILY = re.compile(r"(?i)^hcom_|hccl")
LAYOUT = "profiler_metadata.json parallel_group_info (pipeline group 'pp')"
SIGNATURE = "kernel signature (the compute kernel families a rank calls every step)"
_SIGNATURE_METRIC = "kernel.calls_per_step"


def pipeline_position(rank_dir) -> dict | None:
    """``{"stage": S, "stages": N}`` of a torch_npu rank folder: its ``group_rank`` in the
    ``parallel_group_info`` group named ``pp`` of ``profiler_metadata.json`` and the size of that
    group (its ``global_ranks``); None when the file, the group or a field is absent or malformed
    (never raises: the layout is then found from the kernel signature)."""
    try:
        doc = json.loads((Path(rank_dir) / "profiler_metadata.json").read_bytes())
    except (OSError, ValueError):
        return None
    groups = doc.get("parallel_group_info") if isinstance(doc, dict) else None
    if not isinstance(groups, dict):
        return None
    for g in groups.values():
        if isinstance(g, dict) and g.get("group_name") == "pp":
            pos, members = g.get("group_rank"), g.get("global_ranks")
            if isinstance(pos, int) and not isinstance(pos, bool) and isinstance(members, list) \
                    and 0 <= pos < len(members):
                return {"stage": pos, "stages": len(members)}
    return None


def kernel_signature(metrics: dict) -> dict:
    """``{compute kernel family: calls per step}`` of one rank's per-rank metrics
    (``{(name, labels): (value, evidence, context)}``, :func:`perfgate.metrics.fingerprint.rank_metrics`):
    its ``kernel.calls_per_step`` values, communication families left out (module doc)."""
    out = {}
    for (name, labels), ent in metrics.items():
        if name == _SIGNATURE_METRIC:
            fam = dict(labels).get("family", "")
            if not _is_comm_family(fam):
                out[fam] = float(ent[0])
    return out


@functools.lru_cache(maxsize=65536)
def _is_comm_family(fam: str) -> bool:
    """Whether ``fam`` is a communication family (:data:`COMM_FAMILY`), remembered: every rank of a
    capture asks for the same families."""
    return COMM_FAMILY.match(fam) is not None


def signature_families(sig: dict) -> frozenset:
    """The families of a kernel signature that are run at least once per step (module doc)."""
    return frozenset(f for f, n in sig.items() if n >= 1)


def signature_digest(sig: dict) -> str:
    """A 12-hex digest of a kernel signature's families (sorted)."""
    blob = json.dumps(sorted(signature_families(sig)), separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def same_program(a: dict, b: dict) -> bool:
    """Whether two kernel signatures are one program: the same compute families run at least once
    per step (module doc)."""
    return signature_families(a) == signature_families(b)


@dataclass(frozen=True)
class StageLayout:
    """The stage of each rank: ``stage_of`` ({rank: stage}), ``source`` (:data:`LAYOUT` or
    :data:`SIGNATURE`), ``signatures`` ({stage: digest of its ranks' most common kernel signature},
    stages without a kernel table absent), ``unplaced`` (ranks left out: no kernel table and no
    recorded layout)."""
    stage_of: dict
    source: str
    signatures: dict
    unplaced: tuple = ()

    @property
    def stages(self) -> dict:
        """{stage: its rank ids, sorted}, stages in order."""
        out: dict = {}
        for r in sorted(self.stage_of):
            out.setdefault(self.stage_of[r], []).append(r)
        return dict(sorted(out.items()))

    def to_config(self) -> dict:
        """The fingerprint's ``config["stages"]``: ``source``, ``stage_of`` ({rank as str: stage}),
        ``stages`` ({stage as str: {"ranks", "signature"}}), ``unplaced``."""
        return {"source": self.source,
                "stage_of": {str(r): s for r, s in sorted(self.stage_of.items())},
                "stages": {str(s): {"ranks": ranks, "signature": self.signatures.get(s)}
                           for s, ranks in self.stages.items()},
                "unplaced": list(self.unplaced)}


def find_stages(sums) -> StageLayout | None:
    """The stages of a capture's ranks (:class:`perfgate.metrics.summary.RankSummary` each; module
    doc), or None when the ranks run one program (one stage: the pooled views stay)."""
    sigs = {x.rank: kernel_signature(x.metrics) for x in sums if not x.get("partial")}
    by_layout = _layout_stages(sums)
    if by_layout is not None:
        stage_of, source, unplaced = by_layout, LAYOUT, ()
    else:
        stage_of, source = _signature_stages(sigs), SIGNATURE
        unplaced = tuple(sorted(x.rank for x in sums if x.rank not in stage_of))
        if not _stages_times_data_parallel(stage_of):
            return None
    if len(set(stage_of.values())) < 2:
        return None
    return StageLayout(stage_of=stage_of, source=source, signatures=_stage_digests(stage_of, sigs),
                       unplaced=unplaced)


def _layout_stages(sums) -> dict | None:
    """{rank: pipeline stage} when every rank records its pipeline position (``meta["pipeline"]``,
    :func:`pipeline_position`) with one pipeline size, else None."""
    pos = {x.rank: (x.get("meta") or {}).get("pipeline") for x in sums}
    if not pos or any(p is None for p in pos.values()) or len({p["stages"] for p in pos.values()}) != 1:
        return None
    return {r: int(p["stage"]) for r, p in pos.items()}


def _signature_stages(sigs: dict) -> dict:
    """{rank: stage} of the ranks with a kernel signature: ranks of one signature digest are one
    stage, stages numbered in order of their lowest rank."""
    groups: dict = {}
    for r in sorted(sigs):
        groups.setdefault(signature_digest(sigs[r]), []).append(r)
    ordered = sorted(groups.values(), key=lambda rs: rs[0])
    return {r: s for s, ranks in enumerate(ordered) for r in ranks}


def _stages_times_data_parallel(stage_of: dict) -> bool:
    """Whether the signature groups look like pipeline stages of D data-parallel ranks: every
    group holds a multiple of the smallest group's rank count D, and D is at least 2 (module
    doc)."""
    sizes = {}
    for s in stage_of.values():
        sizes[s] = sizes.get(s, 0) + 1
    d = min(sizes.values())
    return d >= 2 and all(n % d == 0 for n in sizes.values())


def _stage_digests(stage_of: dict, sigs: dict) -> dict:
    """{stage: digest of the most common kernel signature among its ranks with a kernel table}."""
    seen: dict = {}
    for r, s in stage_of.items():
        if r in sigs:
            d = signature_digest(sigs[r])
            seen.setdefault(s, {}).setdefault(d, []).append(r)
    return {s: max(ds.items(), key=lambda kv: (len(kv[1]), -min(kv[1])))[0] for s, ds in sorted(seen.items())}


def stage_views(layout: StageLayout, per_rank: dict, views_of, kernel_ranks=None) -> dict:
    """The cross-rank views of a capture of several stages: ``views_of(per_rank_subset,
    kernel_ranks)`` (the pooled views, :func:`perfgate.metrics.fingerprint._views`) applied to
    each stage's ranks; its p50 / max views become ``stage<S>.p50`` / ``stage<S>.max`` (evidence
    prefixed with the stage and its ranks, context ``stage`` and ``over_ranks``), its rank skew
    gains the label ``stage``; ``rank0`` is taken from the stage holding the lowest rank.
    Unplaced ranks are in no stage view (their rank0 view still counts)."""
    holders = None if kernel_ranks is None else set(kernel_ranks)
    r0 = min(per_rank)
    out: dict = {}
    stages = layout.stages
    if r0 not in layout.stage_of:   # an unplaced lowest rank: its own views, rank0 only
        got = views_of({r0: per_rank[r0]}, [r0] if holders is None or r0 in holders else [])
        out.update({k: m for k, m in got.items() if m.labels.get("view") == terms.VIEW_RANK0})
    for s, ranks in stages.items():
        sub = {r: per_rank[r] for r in ranks if r in per_rank}
        if not sub:
            continue
        got = views_of(sub, None if holders is None else [r for r in sub if r in holders])
        where = f"stage {s} (ranks {', '.join(map(str, sorted(sub)))})"
        for m in got.values():
            view = m.labels.get("view")
            if view == terms.VIEW_RANK0:
                if min(sub) == r0:
                    out[m.key] = m
                continue
            labels = dict(m.labels)
            if view is None:
                labels["stage"] = str(s)
            else:
                labels["view"] = terms.stage_view(s, view)
            key = metric_key(m.name, **labels)
            ctx = dict(m.context, stage=s)
            if view is not None:
                ctx["over_ranks"] = sorted(m.context.get("over_ranks") or sub)
            out[key] = dataclasses.replace(m, key=key, labels=labels, evidence=f"{where}: {m.evidence}",
                                           context=ctx)
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class JobValue:
    """The job-level value of a metric for a p50 request (:func:`job_p50`): ``value`` and the
    ``view`` it was read from, ``p50`` (one stage) or ``stage<S>.p50`` (the largest stage p50)."""
    value: float | int
    view: str

    @property
    def stage(self) -> int | None:
        """The pipeline stage the value came from, None for the pooled p50."""
        return terms.view_stage(self.view)

    def text(self) -> str:
        """``p50``, or ``p50 of stage 1 (the largest stage p50)`` as the reports say it."""
        return terms.VIEW_P50 if self.stage is None else f"p50 of stage {self.stage} (the largest stage p50)"


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v


def job_p50(by_view: dict) -> JobValue | None:
    """The job-level value of one metric (one label set) for a p50 request, from ``{view: value}``.

    The pooled ``p50`` when present (a capture of one stage: exactly its value). Otherwise the
    largest of the stage p50s, ``max over S of stage<S>.p50`` (lowest stage on a tie): a pipeline's
    step ends when its slowest stage ends, so the job's step time is the p50 of the slowest stage;
    other metrics read the same way give the most any stage holds. None when the metric has no p50
    and no stage p50 (views of other kinds and values that are not numbers are not read)."""
    pooled = by_view.get(terms.VIEW_P50)
    if _is_number(pooled):
        return JobValue(pooled, terms.VIEW_P50)
    staged = [(float(v), -terms.view_stage(view), view, v) for view, v in by_view.items()
              if terms.view_stage(view) is not None and terms.base_view(view) == terms.VIEW_P50 and _is_number(v)]
    if not staged:
        return None
    _, _, view, value = max(staged)
    return JobValue(value, view)


def pooled_p50_key(key: str) -> tuple[str, str] | None:
    """``(name{...,view=p50}, view)`` of a metric key in the p50 or a stage p50 view, None for any
    other key."""
    if "p50" not in key:   # most keys: no parse
        return None
    name, labels = parse_metric_key(key)
    view = labels.get("view")
    if view is None or terms.base_view(view) != terms.VIEW_P50:
        return None
    labels["view"] = terms.VIEW_P50
    return metric_key(name, **labels), view


def job_p50_values(values: dict) -> dict:
    """``{pooled p50 key: JobValue}`` (:func:`job_p50`) of every metric with a p50 or stage p50
    view among ``values`` (``{metric key: value}``: a fingerprint's ``{k: m.value}``, a
    comparison's side), in one pass. For a capture of one stage it holds each p50 value as is."""
    groups: dict = {}
    for key, v in values.items():
        got = pooled_p50_key(key)
        if got is not None:
            groups.setdefault(got[0], {})[got[1]] = v
    out = {}
    for k, by_view in groups.items():
        got = job_p50(by_view)
        if got is not None:
            out[k] = got
    return out


def unplaced_warning(layout: StageLayout) -> list:
    """The warning naming ranks left out of the stage views (no kernel table, no layout)."""
    if not layout.unplaced:
        return []
    return [f"ranks {list(layout.unplaced)} hold no kernel table and record no pipeline layout "
            f"(profiler_metadata.json parallel_group_info): their stage is unknown, so they are in no "
            f"per-stage view (stages found by {layout.source})"]


# comparison -----------------------------------------------------------------------------------

def layout_of(fp) -> dict | None:
    """The stage layout a fingerprint records (``config["stages"]``), None for one stage."""
    return (fp.config or {}).get("stages")


def _ranks_by_stage(layout: dict | None) -> dict | None:
    if not layout:
        return None
    return {s: sorted(v.get("ranks") or ()) for s, v in (layout.get("stages") or {}).items()}


def describe_layout(layout: dict | None) -> str:
    """``2 stages (stage 0: ranks 0, 1; stage 1: ranks 2, 3), by <source>`` or ``one stage``."""
    stages = _ranks_by_stage(layout)
    if not stages:
        return "one stage (every rank runs one program)"
    parts = "; ".join(f"stage {s}: ranks {', '.join(map(str, r))}" for s, r in stages.items())
    return f"{len(stages)} stages ({parts}), by {layout.get('source')}"


def layout_change(base, cand) -> str | None:
    """Why the stage views of the two fingerprints cannot be paired (None when both have one
    stage, or the same ranks in the same stages)."""
    b, c = layout_of(base), layout_of(cand)
    if _ranks_by_stage(b) == _ranks_by_stage(c):
        return None
    return f"the pipeline stage layout changed: baseline {describe_layout(b)}, candidate {describe_layout(c)}"


def stage_notes(base, cand) -> list:
    """Sentences about the stage layout for the comparison's notes: a changed layout (cross-rank
    views other than rank0 not compared), or the stages paired and those whose kernel signature
    changed."""
    change = layout_change(base, cand)
    if change:
        return [f"{change}: stage views are not compared (nor the pooled p50 / max and rank skews); "
                f"rank0 is; record a new baseline for the new layout"]
    b, c = layout_of(base), layout_of(cand)
    if not b:
        return []
    notes = [f"pipeline stages: baseline stage S compared with candidate stage S, "
             f"{describe_layout(c)}"]
    for s, v in (b.get("stages") or {}).items():
        cs = (c.get("stages") or {}).get(s) or {}
        if v.get("signature") and cs.get("signature") and v["signature"] != cs["signature"]:
            notes.append(f"stage {s}'s kernel signature changed ({v['signature']} -> {cs['signature']}: other "
                         f"compute kernels or calls per step on that stage); paired by position")
    return notes


def not_paired(name: str, labels: dict, change: str | None) -> str | None:
    """Why a cross-rank value is not compared when the stage layout changed (``change`` from
    :func:`layout_change`): every view but rank0, and every rank skew."""
    if not change:
        return None
    if labels.get("view") == terms.VIEW_RANK0:
        return None
    return change


def gate_views_with_stages(gate_views, *fps) -> tuple:
    """``gate_views`` followed by the stage views of those views the fingerprints ``fps`` hold
    (``p50`` -> ``stage0.p50``, ``stage1.p50``), in order; ``gate_views`` itself when none does."""
    seen = set()
    for fp in fps:
        for m in fp.metrics.values():
            v = m.labels.get("view")
            if terms.view_stage(v) is not None:
                seen.add(v)
    extra = [v for g in gate_views for v in sorted(seen, key=lambda x: (terms.view_stage(x), x))
             if terms.base_view(v) == g and v not in gate_views]
    return tuple(gate_views) + tuple(extra)


def with_stage_views(policy, base, cand):
    """``policy`` with its ``gate_views`` widened to the stage views of the gated views the two
    fingerprints hold (:func:`gate_views_with_stages`); ``policy`` itself when there are none."""
    views = gate_views_with_stages(policy.gate_views, base, cand)
    return policy if views == tuple(policy.gate_views) else dataclasses.replace(policy, gate_views=views)


def _stages_of(keys) -> list:
    """The pipeline stages of the stage views among metric ``keys``, sorted."""
    from perfgate.model import parse_metric_key
    return sorted({s for k in keys for s in [terms.view_stage(parse_metric_key(k)[1].get("view"))]
                   if s is not None})


def cause_view(explains, views, first):
    """The view a cause is told in: the first of ``views`` of its stage when the symptoms it
    explains (``explains``, metric keys) lie in one pipeline stage's views, else ``first``."""
    found = _stages_of(explains)
    if len(found) == 1:
        for v in views:
            if terms.view_stage(v) == found[0]:
                return v
    return first


def name_cause_stages(causes) -> list:
    """Each cause with ``stages``: the pipeline stages whose views hold the symptoms it explains
    (from their keys). When that is one stage, its ``what`` is the text of that stage's view
    (``views``; the first gated view may be another stage's, where nothing moved) prefixed
    ``stage S:``."""
    out = []
    for x in causes:
        found = _stages_of(x.get("explains", ()))
        if found:
            x = dict(x, stages=found)
            if len(found) == 1:
                texts = [t for v, t in (x.get("views") or {}).items() if terms.view_stage(v) == found[0]]
                x["what"] = f"stage {found[0]}: {texts[0] if texts else x.get('what', '')}"
        out.append(x)
    return out

