"""Self-checks grouped per (check, rank) for the JUnit and Markdown reports.

A capture's self-checks run per step: a 5,236-step capture holds ~31k
:class:`~perfgate.model.SelfCheck` rows (6 checks x 5,236 steps). The reports show one entry per
(check name, rank) that counts the steps by status and names the steps that did not pass (the
first :data:`MAX_STEPS_NAMED` of each status and how many more), with each named step's message,
expected / observed values and evidence. The JSON result keeps every per-step row.
"""
from __future__ import annotations

from dataclasses import dataclass

#: failing / warning / skipped steps named (with their message) per (check, rank) group
MAX_STEPS_NAMED = 10
STATUS_ORDER = ("fail", "warn", "skipped", "pass")
_PAST = {"fail": "failed", "warn": "warned", "skipped": "skipped", "pass": "passed"}


@dataclass(frozen=True)
class CheckGroup:
    """The self-checks of one (check ``name``, ``rank``): ``checks`` in capture order.
    ``by_status``: {status: [SelfCheck]}; ``status``: the group's outcome: ``fail`` when any step
    failed, else ``skipped`` when every step was skipped, else ``warn`` when any step warned,
    else ``pass``."""
    name: str
    rank: int | None
    checks: tuple
    by_status: dict

    @property
    def steps(self) -> int:
        """How many self-check rows (one per step; 1 for a capture-wide check) the group holds."""
        return len(self.checks)

    @property
    def capture_wide(self) -> bool:
        """One row without a step (a check of the whole rank, not per step)."""
        return len(self.checks) == 1 and self.checks[0].step is None

    @property
    def status(self) -> str:
        if self.by_status.get("fail"):
            return "fail"
        if len(self.by_status.get("skipped", ())) == len(self.checks):
            return "skipped"
        return "warn" if self.by_status.get("warn") else "pass"

    def tally(self) -> str:
        """``"5230 pass, 6 fail"``-style counts over the group's steps, worst status first."""
        return ", ".join(f"{len(self.by_status[s])} {s}" for s in STATUS_ORDER if self.by_status.get(s))

    def step_list(self, status: str, limit: int = MAX_STEPS_NAMED) -> str:
        """The steps with ``status``: the first ``limit`` and ``"and N more"``."""
        cs = self.by_status.get(status, [])
        names = ", ".join(str(c.step) for c in cs[:limit])
        return names + (f" and {len(cs) - limit} more" if len(cs) > limit else "")

    def headline(self, status: str) -> str:
        """One line for the steps with ``status``: the single row's message when the group has
        one row; else ``"6 of 5236 steps failed (steps 3, 9, ...): step 3: <message>"``."""
        cs = self.by_status.get(status, [])
        if not cs:
            return ""
        if len(self.checks) == 1:
            return cs[0].message
        return (f"{len(cs)} of {len(self.checks)} steps {_PAST.get(status, status)} (steps {self.step_list(status)}): "
                f"step {cs[0].step}: {cs[0].message}")

    def details(self, status: str, limit: int = MAX_STEPS_NAMED) -> list[str]:
        """One line per named step with ``status``: message, expected / observed / tolerance when
        recorded, evidence; a last line counts the steps not named (every row is in the JSON)."""
        cs = self.by_status.get(status, [])
        out = []
        for c in cs[:limit]:
            vals = ", ".join(f"{k} {v}" for k, v in (("expected", c.expected), ("observed", c.observed),
                                                     ("tolerance", c.tolerance)) if v is not None)
            out.append(("" if c.step is None else f"step {c.step}: ") + c.message
                       + (f" ({vals})" if vals else "") + (f"; evidence: {c.evidence}" if c.evidence else ""))
        if len(cs) > limit:
            out.append(f"... and {len(cs) - limit} more {status} step(s): every step is in perfgate-result.json "
                       f"(self_checks)")
        return out


def group_self_checks(checks) -> list[CheckGroup]:
    """Group :class:`~perfgate.model.SelfCheck` rows by (name, rank), in first-seen order."""
    rows: dict = {}
    for c in checks:
        rows.setdefault((c.name, c.rank), []).append(c)
    out = []
    for (name, rank), cs in rows.items():
        by: dict = {}
        for c in cs:
            by.setdefault(c.status, []).append(c)
        out.append(CheckGroup(name=name, rank=rank, checks=tuple(cs), by_status=by))
    return out
