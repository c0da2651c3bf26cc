"""Markdown for the family view (kernel families): category shares (those under ``fold_below`` folded into
Other, the ``unknown`` bucket always listed), phase shares, kernel families above
``family_min_share`` (count, ΣDuration, share, category, phase, core type, op_type class,
pipeline bound, memory_bound, MFU), suggestions P0 / P1 / P2 with their evidence, and the
family-level comparison (count / share deltas, appeared / disappeared families, moves).
Returns lines; never prints. Shares are of ΣDuration (communication overlapped with compute
counted twice) and rendered as percent."""
from __future__ import annotations

from perfgate.report.mdtext import cell as _cell, code as _code


def _pct(v) -> str:
    return "—" if v is None else f"{v * 100:.2f}%"


def fold_categories(cats: list, fold_below: float) -> tuple[list, list]:
    """(rows to show, names folded): categories with share < ``fold_below`` are added to
    ``Other`` (created if absent); ``unknown`` is never folded (it is always reported)."""
    shown, folded, other = [], [], None
    for c in cats:
        if c["category"] != "unknown" and c["category"] != "Other" and (c["share"] or 0) < fold_below:
            folded.append(c)
        else:
            shown.append(dict(c))
    if folded:
        other = next((c for c in shown if c["category"] == "Other"), None)
        if other is None:
            other = {"category": "Other", "sum_dur_us": 0.0, "share": 0.0}
            shown.append(other)
        for c in folded:
            other["sum_dur_us"] = (other["sum_dur_us"] or 0) + (c["sum_dur_us"] or 0)
            other["share"] = (other["share"] or 0) + (c["share"] or 0)
    shown.sort(key=lambda c: -(c["share"] or 0))
    return shown, [c["category"] for c in folded]


def operator_section(result) -> list[str]:
    """Markdown lines for ``result.detail`` (``operators``, ``suggestions``,
    ``operator_compare``); empty when the fingerprint has no family view."""
    detail = result.detail or {}
    ops = detail.get("operators")
    if not ops:
        return []
    out = [f"### Family view (rank {ops.get('rank')}, ΣDuration {ops.get('total_sum_dur_us', 0):,.1f} us "
           f"over the steps of {_code(ops.get('kernel_file'))})", ""]
    sugg = detail.get("suggestions") or []
    if sugg:
        out += ["**Suggestions** (informational, never gated):", ""]
        out += [f"- **{s['priority']}** {_cell(s['text'])} — evidence: {_cell(s['evidence'])}" for s in sugg]
        out.append("")
    if ops.get("categories_available"):
        shown, folded = fold_categories(ops.get("categories") or [], ops.get("fold_below", 0.01))
        out += ["| category | ΣDuration (us) | share |", "|---|---|---|"]
        out += [f"| {_cell(c['category'])} | {c['sum_dur_us']:,.1f} | {_pct(c['share'])} |" for c in shown]
        if folded:
            out.append(f"\nFolded into Other (each < {ops.get('fold_below', 0.01) * 100:g}%): {', '.join(folded)}.")
        unk = ops.get("unknown") or []
        if unk:
            out.append("\nUnknown bucket (no category rule matched; add one to the policy): " + "; ".join(
                f"{_code(u['family'])} ({_cell(u['core_type'])}, {u['calls']} call(s), {_pct(u['share'])})"
                for u in unk[:10]))
        else:
            out.append("\nUnknown bucket: empty (every kernel matched a category rule).")
        out.append("")
    else:
        out += ["Categories: not available (Type / Accelerator Core are N/A, profiler Level0).", ""]
    phases = ops.get("phases") or []
    if phases:
        tot = {}
        for r in phases:
            tot[r["phase"]] = tot.get(r["phase"], 0.0) + (r["share"] or 0)
        out += ["| phase | share | by category |", "|---|---|---|"]
        for ph, v in sorted(tot.items(), key=lambda kv: -kv[1]):
            rows, _ = fold_categories([r for r in phases if r["phase"] == ph], ops.get("fold_below", 0.01))
            parts = ", ".join(f"{r['category']} {_pct(r['share'])}" for r in rows)
            out.append(f"| {_cell(ph)} | {_pct(v)} | {_cell(parts)} |")
        out.append("")
    if not ops.get("pipe_available"):
        out += [f"Pipeline bound: absent — {_cell(ops.get('pipe_note'))}.", ""]
    elif ops.get("bound_shares"):
        out += ["Pipeline bound (share of ΣDuration by bound family): " + ", ".join(
            f"{b} {_pct(v)}" for b, v in sorted(ops["bound_shares"].items(), key=lambda kv: -kv[1])), ""]
    fams = [f for f in ops.get("families") or [] if (f.get("share") or 0) > ops.get("family_min_share", 0.01)]
    if fams:
        has_mfu = any(f.get("mfu") is not None for f in fams)
        out += [f"<details><summary>Kernel families above {ops.get('family_min_share', 0.01) * 100:g}% of device "
                f"time ({len(fams)})</summary>", "",
                "| family | calls/step | calls | ΣDuration (us) | share | category | phase | core | op_type class | "
                "bound (stage) | memory_bound |" + (" MFU |" if has_mfu else ""),
                "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if has_mfu else "")]
        for f in fams:
            mb = f.get("memory_bound")
            row = (f"| {_code(f['family'], table=True)} | {f['calls_per_step']:g} | {f['calls']} | {f['sum_dur_us']:,.1f} | "
                   f"{_pct(f['share'])} | {_cell(f['category'])} | {_cell(f['phase'])} | {_cell(f['core_type'])} | "
                   f"{f['op_class']} | {f['bound']}" + (f" ({f['bound_stage']})" if f.get("bound_stage") else "")
                   + f" | {'—' if mb is None else f'{mb:.2f}'} |")
            if has_mfu:
                row += f" {_pct(f.get('mfu'))} {f.get('mfu_dtype') or ''} |"
            out.append(row)
        out += ["", "</details>", ""]
    classes = ops.get("mfu_classes") or []
    if classes:
        out += [f"<details><summary>MFU by call class ({len(classes)})</summary>", "",
                "| family | Input Shapes | dtype | calls | FLOPs / call | mean duration (us) | peak (TFLOP/s) | MFU |",
                "|---|---|---|---|---|---|---|---|"]
        out += [f"| {_code(c['family'], table=True)} | {_code(c['input_shapes'], table=True)} | {c['dtype']} | {c['calls']} | "
                f"{c['flops_per_call']:.4g} | {c['mean_dur_us']:,.2f} | {c['peak'] / 1e12:g} | {_pct(c['mfu'])} |"
                for c in classes[:50]]
        out += ["", "</details>", ""]
    elif ops.get("mfu_note"):
        out += [f"MFU: {_cell(ops['mfu_note'])}.", ""]
    cmp = detail.get("operator_compare")
    if cmp:
        if not cmp.get("available"):
            out += [f"Family comparison: {_cell(cmp.get('note'))}", ""]
        else:
            changed = [r for r in cmp["families"] if r["status"] != "same" or r["count_delta"] or r["moved"]
                       or abs(r["share_delta_pp"]) >= 0.5]
            out.append(f"**Family comparison**: {len(changed)} kernel famil{'y' if len(changed) == 1 else 'ies'} "
                       f"changed (calls, presence, placement or share ≥ 0.5 pp). Shares here are of the rank's "
                       f"ΣDuration over all its steps; the gated `share.family` is the median of the per-step "
                       f"shares, so the two differ slightly when steps differ.")
            for m in cmp.get("category_moves") or []:
                out.append(f"- category **{_cell(m['category'])}** moved from {_cell(m['from'])} to {_cell(m['to'])}")
            for m in cmp.get("moves") or []:
                out.append(f"- {_code(m['family'])} moved: {m['field']} {_cell(m['from'])} → {_cell(m['to'])}")
            for m in cmp.get("renames") or []:
                out.append(f"- {_code(m['from'])} renamed to {_code(m['to'])} (same calls per step, core type "
                           f"and Type class; informational)")
            if changed:
                out += ["", "| family | status | calls/step | Δ calls | share | Δ share | ΣDuration ratio | category |",
                        "|---|---|---|---|---|---|---|---|"]
                for r in changed[:40]:
                    ratio = "—" if r["dur_ratio"] is None else f"{r['dur_ratio']:.2f}x"
                    out.append(f"| {_code(r['family'], table=True)} | {r['status']} | {r['calls_per_step_base']:g} → "
                               f"{r['calls_per_step_cand']:g} | {r['count_delta']:+g} | {_pct(r['share_base'])} → "
                               f"{_pct(r['share_cand'])} | {r['share_delta_pp']:+.2f} pp | {ratio} | "
                               f"{_cell(r['category'])} |")
            out.append("")
    return out
