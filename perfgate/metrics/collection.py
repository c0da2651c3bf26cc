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

* ``options[name]``: the value every rank that records the field agrees on, normalised by one
  rule (:func:`normalised`): a written value is the value of torch_npu's parameter it spells, so
  one setting written two ways is one value. A switch is a bool (``"true"``, ``"False"``, 1, 0);
  a ``schedule`` count is an int (``"1"``; only exact integer text, ``" 1"`` or ``"1.0"`` stay as
  written), the schedule kept as ``{"wait", "warmup", "active", "repeat", "skip_first"}``; an
  activity is its ProfilerActivity member's name, upper case (``ProfilerActivity.NPU``, ``"npu"``:
  ``NPU``), the activities kept as the set ``"CPU,NPU"`` (a repeated entry once; a string is the
  set joined by commas; an empty list is torch.profiler's default, CPU and NPU). A value that spells none is kept as written.
  ``None`` means **not recorded**: no rank's profiler_info holds a value for the field (a rank
  folder without profiler_info, a file without ``common_config``, an older torch_npu, a raw msprof
  capture). A JSON null is not recorded too: null is no value the profiler chose (a rank writing
  null counts as little as a rank without the field). Not recorded is never read as false;
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

When two sides differ, one rule for every option and every use (:func:`collection_notes`,
:func:`measured_difference`, :func:`series_signature`): an option not recorded is judged as
torch_npu's default for it (:data:`DEFAULTS`), so two sides differ in an option when their values
so read differ (or the ranks' values, where a side's ranks differ). with_stack not recorded
against with_stack false, or activities not recorded against ``CPU,NPU``, is no difference;
against with_stack true or activities ``NPU`` it is, shown as ``not recorded``. torch_npu's
default schedule is none (every step between start and stop is captured), so a schedule not
recorded differs from every recorded schedule. A fingerprint without the section is judged as
recording nothing.

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

#: torch_npu.profiler.profile's defaults (activities None = CPU and NPU, schedule None = no
#: schedule): an option not recorded is judged as its default (module doc)
DEFAULTS = {"with_stack": False, "record_shapes": False, "profile_memory": False, "with_modules": False,
            "with_flops": False, "activities": "CPU,NPU", "l2_cache": False, "schedule": None}

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


def _switch(value):
    """A switch's spelling as its bool: ``"true"`` / ``"false"`` (any case, around blanks), 1 / 0."""
    if isinstance(value, bool):
        return value
    spelled = {"true": True, "false": False, "1": True, "0": False}
    key = value.strip().lower() if isinstance(value, str) else (str(value) if value in (0, 1) else None)
    return spelled.get(key, value)


def _count(value):
    """A schedule count's spelling as its int: exact integer text (``"1"``, ``"-1"``)."""
    if isinstance(value, str):
        try:
            number = int(value)
        except ValueError:
            return value
        return number if str(number) == value else value
    return value


def _activity(value) -> str:
    """An activity's spelling as its ProfilerActivity member's name: ``ProfilerActivity.NPU``, ``npu``: ``NPU``."""
    return str(value).rsplit(".", 1)[-1].upper()


def normalised(name: str, value):
    """One rank's written value of option ``name`` as the section keeps it (module doc: the value
    of torch_npu's parameter it spells): a switch (an option whose default is a bool) as that bool,
    ``activities`` as sorted upper-case short names joined by ``,``, ``schedule`` as a dict in
    :data:`_SCHEDULE_KEYS` order (unknown keys kept after them) of ints; a value that spells none
    as written (shown as such); None (null) stays None, not recorded."""
    if isinstance(DEFAULTS.get(name), bool):
        return _switch(value)
    if name == "activities" and isinstance(value, (list, tuple, str)):
        # a set of activities (torch.profiler reads activities=[] as its default, CPU and NPU); a
        # string is the set written joined by commas
        names = sorted({_activity(a) for a in (value.split(",") if isinstance(value, str) else value)
                        if str(a).strip()})
        return ",".join(names) if names else DEFAULTS["activities"]
    if name == "schedule" and isinstance(value, dict):
        return {k: _count(value[k]) for k in (*_SCHEDULE_KEYS, *sorted(set(value) - set(_SCHEDULE_KEYS), key=str))
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
        written = {str(r): normalised(name, (info.get("collection") or {}).get(name))
                   for r, info in sorted(infos.items())}
        by_rank = {r: v for r, v in written.items() if v is not None}   # null or missing: not recorded
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


#: a section recording no option: what a fingerprint without the section is judged as
_NOTHING_RECORDED = {"options": {}, "ranks_differ": {}}


def _judged(section: dict, name: str) -> tuple:
    """What option ``name`` of a section is judged by (module doc): its value, torch_npu's default
    (:data:`DEFAULTS`) where not recorded, with each rank's value where the ranks differ."""
    value = section["options"].get(name)
    return (DEFAULTS.get(name) if value is None else value), (section.get("ranks_differ") or {}).get(name)


def _differs(a: dict, b: dict, name: str) -> bool:
    """Whether two sections differ in option ``name``: the one rule of every judgement (module doc)."""
    return _judged(a, name) != _judged(b, name)


def series_signature(config: dict) -> list[str]:
    """The measured options (:data:`MEASURED`) a run was collected with away from torch_npu's
    defaults, as ``name=value`` (``["with_stack=true"]``); ``[]`` for default options, options not
    recorded and a config without the section (judged as the defaults, so the series key of a run
    recorded before perfgate read them stays what it was)."""
    sec = section_of(config) or _NOTHING_RECORDED
    return [f"{n}={_shown_option(sec, n)}" for n in MEASURED if _differs(sec, _NOTHING_RECORDED, n)]


def measured_difference(a: dict, b: dict) -> str | None:
    """The first option of :data:`MEASURED` two fingerprint configs differ in (module doc: an
    option not recorded, or a config without the section, is judged as torch_npu's default), as
    ``with_stack: false vs true`` (``not recorded vs true``); None when they agree."""
    sa, sb = section_of(a) or _NOTHING_RECORDED, section_of(b) or _NOTHING_RECORDED
    for n in MEASURED:
        if _differs(sa, sb, n):
            return f"{n}: {_shown_option(sa, n)} vs {_shown_option(sb, n)}"
    return None


def collection_notes(base_config: dict, cand_config: dict) -> list[str]:
    """Notes for the collection options a baseline and a candidate differ in (module doc: an
    option not recorded is judged as torch_npu's default), one per option:
    ``collection option with_stack changed: baseline false -> candidate true: <what it affects>``
    (:data:`AFFECTS`). A side without the section at all (saved before perfgate read the options)
    gives one note naming every option the other side differs in."""
    b, c = section_of(base_config), section_of(cand_config)
    if b is None and c is None:
        return []
    if b is None or c is None:
        side, other_side, other = ("baseline", "candidate", c) if b is None else ("candidate", "baseline", b)
        odd = [n for n in ORDER if _differs(_NOTHING_RECORDED, other, n)]
        if not odd:
            return []
        return [f"collection options not recorded in the {side} (fingerprinted before perfgate read them), "
                f"the {other_side} was collected with {', '.join(f'{n}={_shown_option(other, n)}' for n in odd)}: "
                f"{AFFECTS[odd[0]]}"]
    return [f"collection option {name} changed: baseline {_shown_option(b, name)} -> candidate "
            f"{_shown_option(c, name)}: {AFFECTS[name]}" for name in ORDER if _differs(b, c, name)]
