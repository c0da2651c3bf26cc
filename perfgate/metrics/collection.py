"""The profiler's collection options of a capture: what torch_npu was asked to record.

Source: ``profiler_info_<N>.json`` of each rank folder (SCHEMAS.md §0), read by
:func:`perfgate.ingest.discover.collection_fields`: ``config.common_config`` (``activities``,
``schedule``, ``with_stack``, ``record_shapes``, ``profile_memory``, ``with_modules``,
``with_flops``) and ``config.experimental_config._l2_cache``. ``profiler_metadata.json`` holds no
collection option (only ENV_VARIABLES, distributed_args, parallel_group_info). The profiler
level, aic_metrics and export type are collection options too; they are config facets of their
own (``config["profiler_level"]`` ...), noted by :func:`perfgate.compare.rules.config_notes`.

The fingerprint's section ``config["collection"]`` (:func:`collection_section`)::

    {"options": {name: value}, "ranks_differ": {name: {rank: value}}, "source": text}

* ``options[name]``: the value every rank that records the field agrees on, normalised:
  ``activities`` as ``"CPU,NPU"``, ``schedule`` as ``{"wait", "warmup", "active", "repeat",
  "skip_first"}``, the switches as true / false (also when written as ``"true"``, ``"False"``, 1
  or 0: one switch, one value).
  ``None`` means **not recorded**: no rank's profiler_info holds the field (a rank folder without
  profiler_info, an older torch_npu, a raw msprof capture). Not recorded is never read as false;
  ``false`` means the profiler wrote false.
* ``ranks_differ``: the options the ranks of this one capture record differently, each rank's
  value by rank id; ``options[name]`` is then :data:`MIXED`, and the fingerprint carries a warning
  (one capture's ranks are collected by one profiler call). A rank that does not record a field
  does not count.

What changes what is measured (:data:`MEASURED`), one rule: an option changes what is measured
when it changes the work the profiler itself does while the profiled steps run.

* ``with_stack``, ``record_shapes``, ``profile_memory``, ``with_modules``, ``with_flops``:
  host-side work per operator (its Python call stack, its input shapes and types, every
  allocation, its module hierarchy, FLOP estimates from its shapes; torch_npu docs: effective with
  ProfilerActivity.CPU). The launch path pays it, so host-bound figures and the step time (host
  latency shows as device Free between kernels) are not like-for-like; vllm-ascend PR #6141
  measured heavy host latency from ``with_stack``.
* ``activities``: without CPU the framework side is not traced at all (none of that host work, no
  host events); without NPU nothing on the device is.
* ``l2_cache``: L2 cache sampling on the device (PMU collection, as ``aic_metrics`` is).
* ``schedule`` says which steps are captured (skip_first, wait, warmup, active, repeat), not how a
  step is measured: a difference is noted, nothing else.

Treatment, as the profiler-level change's (one rule, no exceptions): a difference between a
baseline and a candidate is a note at the top of every report, naming the option, both values
and what it affects (:func:`collection_notes`); the metrics are still judged, so the note is the
verdict's context. The options of :data:`MEASURED` split history series
(:func:`series_signature`, part of :func:`perfgate.history.store.series_key`) and must match
across repeated captures of one side (:func:`perfgate.metrics.repeat.require_one_job`).

The section is made where the ranks' summaries are merged
(:func:`perfgate.metrics.fingerprint.fingerprint_from_summaries`), so every way of reading a
capture records it. A fingerprint or baseline without the section (saved before perfgate read the
options) is "not recorded" on every option. Pure: no I/O.
"""
from __future__ import annotations

#: ``options[name]`` of an option the ranks of one capture record differently
MIXED = "differs across ranks"

#: the section's options in the order they are shown
ORDER = ("with_stack", "record_shapes", "profile_memory", "with_modules", "with_flops", "activities",
         "l2_cache", "schedule")

#: torch_npu.profiler.profile's defaults (activities None = CPU and NPU): a run recorded without
#: the section is read as collected with them for history series (:func:`series_signature`)
DEFAULTS = {"with_stack": False, "record_shapes": False, "profile_memory": False, "with_modules": False,
            "with_flops": False, "activities": "CPU,NPU", "l2_cache": False}

_HOST = ("host-side overhead per operator, so host-bound and step-time figures are not like-for-like "
         "(still judged, as across a profiler-level change)")

#: what each option affects; the options that change what is measured (module doc)
AFFECTS = {
    "with_stack": "the profiler records every operator's Python call stack: " + _HOST,
    "record_shapes": "the profiler records every operator's input shapes and types: " + _HOST,
    "profile_memory": "the profiler records every tensor allocation and free: " + _HOST,
    "with_modules": "the profiler records every operator's module hierarchy: " + _HOST,
    "with_flops": "the profiler estimates every operator's FLOPs from its shapes: " + _HOST,
    "activities": ("which sides are traced (CPU: framework and host events, NPU: the device): the host-side "
                   "profiling overhead and the host events come and go, so host-bound and step-time figures "
                   "are not like-for-like (still judged, as across a profiler-level change)"),
    "l2_cache": ("the device samples L2 cache hits (PMU collection, as aic_metrics): device-side collection "
                 "differs, so kernel durations are not like-for-like (still judged, as across a "
                 "profiler-level change)"),
    "schedule": "another part of the run is captured (which steps, how many); how a step is measured is the same",
}

#: the options that change what is measured: they split history series (module doc)
MEASURED = tuple(k for k in ORDER if k != "schedule")

_SCHEDULE_KEYS = ("wait", "warmup", "active", "repeat", "skip_first")


def normalised(name: str, value):
    """One rank's written value of option ``name`` as the section keeps it: ``activities`` as
    sorted short names joined by ``,`` (``ProfilerActivity.NPU`` -> ``NPU``), ``schedule`` as a
    dict in :data:`_SCHEDULE_KEYS` order (unknown keys kept after them), a switch (an option whose
    default is a bool) written as ``"true"`` / ``"false"`` (any case) or 1 / 0 as that bool, anything
    else as written (a switch written as something else stays as written and is shown as such)."""
    if isinstance(DEFAULTS.get(name), bool) and not isinstance(value, bool):
        spelled = {"true": True, "false": False, "1": True, "0": False}
        key = value.strip().lower() if isinstance(value, str) else (str(value) if value in (0, 1) else None)
        return spelled.get(key, value)
    if name == "activities" and isinstance(value, (list, tuple)):
        return ",".join(sorted(str(a).rsplit(".", 1)[-1] for a in value))
    if name == "schedule" and isinstance(value, dict):
        return {k: value[k] for k in (*_SCHEDULE_KEYS, *sorted(set(value) - set(_SCHEDULE_KEYS), key=str))
                if k in value}
    return value


def collection_section(infos: dict) -> dict:
    """The ``config["collection"]`` section (module doc) of one capture.

    Args:
        infos: {rank id: profiler_info facets} (:func:`perfgate.ingest.discover.read_profiler_info`;
            ``{}`` for a rank folder without profiler_info).

    Returns:
        ``{"options", "ranks_differ", "source"}``; every option in :data:`ORDER` is a key of
        ``options`` (None: not recorded)."""
    options, differ = {}, {}
    for name in ORDER:
        by_rank = {str(r): normalised(name, (info.get("collection") or {})[name])
                   for r, info in sorted(infos.items())
                   if name in (info.get("collection") or {})}
        values = list(by_rank.values())
        if not values:
            options[name] = None
        elif all(v == values[0] for v in values):
            options[name] = values[0]
        else:
            options[name] = MIXED
            differ[name] = by_rank
    return {"options": options, "ranks_differ": differ,
            "source": "profiler_info_<N>.json config.common_config / experimental_config of each rank"}


def shown(value) -> str:
    """An option's value in words: ``not recorded`` (None), ``true`` / ``false``, a schedule as
    ``wait=0 warmup=10 active=1 repeat=1 skip_first=40``, else the value."""
    if value is None:
        return "not recorded"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):   # a schedule; read back from a file saved with sorted keys too
        return " ".join(f"{k}={shown(v)}" for k, v in normalised("schedule", value).items())
    return str(value)


def _shown_option(section: dict, name: str) -> str:
    """``shown`` of one option of a section, each rank's value when the ranks differ."""
    value = section["options"].get(name)
    if value == MIXED:
        ranks = section.get("ranks_differ", {}).get(name, {})
        return f"{MIXED} ({', '.join(f'rank {r} {shown(v)}' for r, v in ranks.items())})"
    return shown(value)


def section_of(config: dict) -> dict | None:
    """A fingerprint config's collection section, or None when it has none (a fingerprint saved
    before perfgate read the options, or one from :func:`perfgate.metrics.fingerprint.fingerprint_capture`)."""
    sec = config.get("collection")
    return sec if isinstance(sec, dict) and isinstance(sec.get("options"), dict) else None


def summary_text(config: dict) -> str:
    """The collection options of a fingerprint config in one line, ``name=value`` in :data:`ORDER`
    (``collection options: with_stack=true, record_shapes=true, ..., schedule=wait=0 ...``); says
    so when the config has no section."""
    sec = section_of(config)
    if sec is None:
        return "collection options not recorded"
    return "collection options: " + options_text(sec)


def options_text(section: dict) -> str:
    """A section's options as ``with_stack=true, record_shapes=false, ...`` in :data:`ORDER`
    (each rank's value where the ranks differ)."""
    return ", ".join(f"{n}={_shown_option(section, n)}" for n in ORDER)


def ranks_differ_warning(section: dict) -> str | None:
    """The warning for options the ranks of one capture record differently, or None."""
    differ = section.get("ranks_differ") or {}
    if not differ:
        return None
    parts = "; ".join(f"{n}: {_shown_option(section, n)}" for n in ORDER if n in differ)
    return (f"the ranks record different profiler collection options ({parts}): one capture's ranks are "
            f"collected by one profiler call, so their figures are not like-for-like")


def _deviates(name: str, value) -> bool:
    """A recorded value of a measured option other than torch_npu's default (:data:`DEFAULTS`)."""
    return value is not None and name in DEFAULTS and value != DEFAULTS[name]


def series_signature(config: dict) -> list[str]:
    """The measured options (:data:`MEASURED`) a run was collected with away from torch_npu's
    defaults, as ``name=value`` (``["with_stack=true"]``); ``[]`` for default options, options not
    recorded and a config without the section (a run recorded before perfgate read them is read
    as collected with the defaults, so its series key stays what it was)."""
    sec = section_of(config)
    if sec is None:
        return []
    return [f"{n}={shown(sec['options'].get(n))}" for n in MEASURED if _deviates(n, sec["options"].get(n))]


def measured_difference(a: dict, b: dict) -> str | None:
    """The first option of :data:`MEASURED` both fingerprint configs record, with different
    values, as ``with_stack: false vs true``; None when they agree. An option one side does not
    record (or a config without the section) is no evidence of a difference and is passed over."""
    sa, sb = section_of(a), section_of(b)
    if sa is None or sb is None:
        return None
    for n in MEASURED:
        va, vb = sa["options"].get(n), sb["options"].get(n)
        if va is None or vb is None:
            continue
        if (va, sa.get("ranks_differ", {}).get(n)) != (vb, sb.get("ranks_differ", {}).get(n)):
            return f"{n}: {_shown_option(sa, n)} vs {_shown_option(sb, n)}"
    return None


def collection_notes(base_config: dict, cand_config: dict) -> list[str]:
    """Notes for the collection options a baseline and a candidate differ in, one per option:
    ``collection option with_stack changed: baseline false -> candidate true: <what it affects>``
    (:data:`AFFECTS`). An option one side does not record is noted only when the other side's
    value is not torch_npu's default; a side without the section at all (saved before perfgate
    read the options) gives one note when the other side was collected away from the defaults."""
    b, c = section_of(base_config), section_of(cand_config)
    if b is None and c is None:
        return []
    if b is None or c is None:
        side, other_side, other = ("baseline", "candidate", c) if b is None else ("candidate", "baseline", b)
        odd = [n for n in MEASURED if _deviates(n, other["options"].get(n))]
        if not odd:
            return []
        return [f"collection options not recorded in the {side} (fingerprinted before perfgate read them), "
                f"the {other_side} was collected with {', '.join(f'{n}={_shown_option(other, n)}' for n in odd)}: "
                f"{AFFECTS[odd[0]]}"]
    notes = []
    for name in ORDER:
        bv, cv = b["options"].get(name), c["options"].get(name)
        if bv == cv and (b.get("ranks_differ") or {}).get(name) == (c.get("ranks_differ") or {}).get(name):
            continue
        if (bv is None or cv is None) and not (_deviates(name, bv) or _deviates(name, cv) or MIXED in (bv, cv)):
            continue
        notes.append(f"collection option {name} changed: baseline {_shown_option(b, name)} -> candidate "
                     f"{_shown_option(c, name)}: {AFFECTS[name]}")
    return notes
