"""JUnit XML for CI test reporters (case C03).

Root ``<testsuites>`` with counts and ``time``; suites ``perfgate.self_checks`` (one testcase per
self-check and rank, :mod:`perfgate.report.selfchecks`: an ``<error>`` when any step failed, whose
message names the failing steps (the first ten and how many more) and whose text gives each named
step's message, values and evidence; ``<skipped>`` when every step was skipped; ``<system-out>``
counts the steps by status and lists warned / skipped steps) and ``perfgate.metrics`` (one testcase
per gated metric). A gated regression is a ``<failure>`` whose text names its cause
(:mod:`perfgate.compare.causes`), an invalid capture an ``<error>``, a damaged baseline store (a
damaged baseline file or history database, DAMAGED_BASELINE) an ``<error>`` naming the file and
the hint, a missing baseline ``<skipped>``; an ``unsure`` metric (repeated captures, too few runs)
is ``<skipped>`` with its reason, a ``<failure>`` (type ``unsure``) only when the policy's
``statistics.unsure_fails`` made the check exit 1. There is always at least one testcase; names are XML-escaped by junit-xml.

Matrix builds (case Q06): with a ``key`` (the leg's key, as ``--comment-key``) every suite name
and testcase class name carries it as a ``[KEY]`` suffix (``perfgate.metrics[main/llama-7b]``,
``perfgate.metric.step.time_us[main/llama-7b]``), so reports merged from several legs never hold
two testcases with the same (suite, class, name).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

from junit_xml import TestCase, TestSuite, to_xml_report_string

from perfgate import terms
from perfgate.compare.attribution import ATTRIBUTION_LEAD
from perfgate.report.selfchecks import group_self_checks
from perfgate.report.summary import DAMAGED_NOTE, error_where, store_failure


def _case(name, classname, elapsed=0.0):
    return TestCase(name, classname=classname, elapsed_sec=elapsed)


def render_junit(result, key: str | None = None) -> str:
    """``GateResult`` -> JUnit XML text; ``key`` (a matrix leg's key) suffixes suite and class
    names as ``[KEY]``."""
    checks = []
    for g in group_self_checks(result.self_checks):
        tc = _case(g.name if g.rank is None else f"{g.name} rank {g.rank}", f"perfgate.self_check.{g.name}")
        status = g.status
        if status == "fail":
            tc.add_error_info(g.headline("fail"), "\n".join(g.details("fail")))
        elif status == "skipped":
            tc.add_skipped_info(g.headline("skipped"))
        out = [("capture-wide check: " if g.capture_wide else f"{g.steps} step(s) checked: ") + g.tally()]
        for s in ("warn", "skipped") if status != "skipped" else ():
            if g.by_status.get(s):
                out += [f"{'warning' if s == 'warn' else 'skipped'}: {g.headline(s)}"] + g.details(s)
        tc.stdout = "\n".join(out)
        checks.append(tc)
    metrics = []
    if result.status == terms.INVALID:
        err = result.error or {}
        tc = _case("capture is valid", "perfgate.capture")
        where = err.get("path") or ""
        if err.get("row") is not None:
            where += f" row {err['row']}"
        if err.get("byte_offset") is not None:
            where += f" byte {err['byte_offset']}"
        tc.add_error_info(err.get("message", "invalid capture"), where)
        metrics.append(tc)
    elif result.status in terms.STORE_FAILED:  # an <error>: CI marks it red, never skipped like a missing baseline
        err = result.error or {}
        tc = _case(f"baseline {result.baseline_name}", "perfgate.baseline")
        text = [error_where(err), f"hint: {err['hint']}" if err.get("hint") else "", DAMAGED_NOTE]
        tc.add_error_info(f"{store_failure(result.status).removeprefix('the ')}: {err.get('message', '')}",
                          "\n".join(t for t in text if t),
                          error_type="store_error" if result.status == terms.STORE_ERROR else "damaged_baseline")
        metrics.append(tc)
    elif result.status in (terms.NO_BASELINE, terms.INCOMPATIBLE):
        tc = _case(f"baseline {result.baseline_name}", "perfgate.baseline")
        tc.add_skipped_info((result.error or {}).get("message", "no baseline"))
        metrics.append(tc)
    cause_of: dict = {}
    for x in result.causes:
        for k in x["explains"]:
            cause_of.setdefault(k, []).append(f"{x['kind']} {x['subject']} ({x['what']})")
    unsure_fails = result.status == terms.UNSURE_STATUS and result.exit_code != 0
    for cmp in result.comparisons:
        if not cmp.gated:
            continue
        tc = _case(cmp.key, f"perfgate.metric.{cmp.name}")
        if cmp.fails:
            # the message stays one readable line; the culprit families go to the failure text
            head, _, culprits = cmp.reason.partition(ATTRIBUTION_LEAD)
            causes = cause_of.get(cmp.key)
            if cmp.verdict == terms.MISSING:   # not slower: no longer measured (a file or column gone)
                tc.add_failure_info(head, f"the baseline measured this gated metric; the candidate does not\n"
                                          f"evidence: {cmp.evidence}", failure_type="missing")
                metrics.append(tc)
                continue
            text = ((f"cause: {'; '.join(causes)}\n" if causes else "no cause found among kernel families, "
                     "communication kinds and the step anatomy\n")
                    + (f"kernel families that grew most: {culprits}\n" if culprits else "") + f"evidence: {cmp.evidence}")
            tc.add_failure_info(head, text, failure_type="regression")
        elif cmp.verdict == terms.UNSURE and unsure_fails:
            # statistics.unsure_fails made this check exit 1: a CI test view must show it red too
            tc.add_failure_info(f"{cmp.verdict}: {cmp.reason}", "the policy sets statistics.unsure_fails: an "
                                f"unsure gated metric fails the check\nevidence: {cmp.evidence}", failure_type="unsure")
        elif cmp.verdict in (terms.INCOMPARABLE, terms.UNSURE):
            tc.add_skipped_info(f"{cmp.verdict}: {cmp.reason}")
        else:
            tc.stdout = cmp.reason
        metrics.append(tc)
    if not metrics and not checks:
        tc = _case("gate", "perfgate.app.gate")
        tc.add_skipped_info("no gated metric was compared")
        metrics.append(tc)
    suites = [TestSuite("perfgate.self_checks", checks), TestSuite("perfgate.metrics", metrics)]
    suites = [s for s in suites if s.test_cases]
    if key:
        for s in suites:
            s.name = f"{s.name}[{key}]"
            for tc in s.test_cases:
                tc.classname = f"{tc.classname}[{key}]"
    # junit-xml's pretty printing goes through minidom; ElementTree indents the same tree faster
    xml = to_xml_report_string(suites, prettyprint=False, encoding="utf-8")
    root = ET.fromstring(xml)
    root.set("name", "perfgate")
    root.set("time", f"{result.elapsed_s:.3f}")
    for suite in root.iter("testsuite"):
        suite.set("time", suite.get("time") or "0.000")
        for case in suite.iter("testcase"):
            case.set("time", case.get("time") or "0.000")
    ET.indent(root, space="\t")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
