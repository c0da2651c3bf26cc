"""Header alias tables: the only place raw profiler column names appear.

Each table maps a canonical snake_case column to the header spellings seen across
torch_npu / CANN generations (../shared/fixtures/ascend/SCHEMAS.md §1-§3). Columns are
always found by name, never by position.
"""
from __future__ import annotations

# kernel_details.csv (torch_npu) and op_summary_*.csv (msprof) are the same rows under two
# headers: torch_npu renames Op Name->Name, OP Type->Type, Task Type->Accelerator Core,
# Task Start Time(us)->Start Time(us), Task Duration(us)->Duration(us),
# Task Wait Time(us)->Wait Time(us) (torch_npu _kernel_view_parser.py).
KERNEL_ALIASES: dict[str, tuple[str, ...]] = {
    "step_id": ("Step Id", "Step ID"),
    "device_id": ("Device_id",),
    "model_id": ("Model ID",),
    "task_id": ("Task ID",),
    "stream_id": ("Stream ID",),
    "name": ("Name", "Op Name"),
    "op_type": ("Type", "OP Type"),
    "op_state": ("OP State",),
    "core_type": ("Accelerator Core", "Task Type"),
    "start_us": ("Start Time(us)", "Task Start Time(us)"),
    "dur_us": ("Duration(us)", "Task Duration(us)"),
    "wait_us": ("Wait Time(us)", "Task Wait Time(us)"),
    "block_dim": ("Block Dim", "Block Num"),
    "mix_block_dim": ("Mix Block Dim", "Mix Block Num"),
    "input_shapes": ("Input Shapes",),
    "input_dtypes": ("Input Data Types",),
}
# P04: Name, Type, Start Time(us), Duration(us) are required; everything else is optional.
KERNEL_REQUIRED = ("name", "op_type", "start_us", "dur_us")

STEP_TRACE_ALIASES: dict[str, tuple[str, ...]] = {
    "device_id": ("Device_id",),
    "step": ("Step",),
    "computing_us": ("Computing",),
    "comm_not_overlapped_us": ("Communication(Not Overlapped)",),
    "overlapped_us": ("Overlapped",),
    "comm_us": ("Communication",),
    "free_us": ("Free",),
    "stage_us": ("Stage",),
    "bubble_us": ("Bubble",),
    "comm_not_overlapped_excl_recv_us": ("Communication(Not Overlapped and Exclude Receive)",),
    "preparing_us": ("Preparing",),
}
STEP_TRACE_REQUIRED = ("step", "computing_us", "comm_not_overlapped_us", "comm_us", "free_us")

# op_statistic.csv / op_statistic_<ts>.csv (SCHEMAS.md §3): one row per (OP Type, Core Type)
OP_STATISTIC_ALIASES: dict[str, tuple[str, ...]] = {
    "device_id": ("Device_id",),
    "op_type": ("OP Type",),
    "core_type": ("Core Type",),
    "count": ("Count",),
    "total_us": ("Total Time(us)",),
}
OP_STATISTIC_REQUIRED = ("op_type", "core_type", "count", "total_us")

# Values of the core-type column (Accelerator Core / Task Type) seen in real captures.
KNOWN_CORE_TYPES = frozenset({
    "AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU", "DSA_SQE", "HCCL",
    "COMMUNICATION", "AI_CPU_SQE", "SDMA", "WRITE_BACK", "FFTS_PLUS", "DVPP",
})
# Values that mean "the communication core" in any generation (HCCL <= 2025-01, COMMUNICATION after).
COMM_CORE_TYPES = frozenset({"HCCL", "COMMUNICATION"})
# Cells that mean "no value" (P06) in a *text* column (Name, Type, Accelerator Core, Step Id,
# Stream ID, shapes): every spelling a spreadsheet round trip may leave.
MISSING_TOKENS = ("N/A", "", "NA", "n/a", "NaN", "nan", "None", "null")
# The only "not applicable" spellings a *numeric* cell may hold: torch_npu / msprof write
# ``N/A`` (communication rows, missing PMU metrics; SCHEMAS.md §1) or leave the cell empty.
# Any other non-number (``nan``, ``NaN``, ``inf``, ``None``, ``null``, text) in a numeric
# column the gate reads is an invalid capture (exit 3), never a silently dropped row.
NA_MARKERS = ("N/A", "")

# Overlap Analysis thread/event names in trace_view.json (torch_npu).
OVERLAP_PROCESS = "Overlap Analysis"
OVERLAP_KINDS = {
    "Computing": "computing",
    "Communication": "comm",
    "Communication(Not Overlapped)": "comm_not_overlapped",
    "Free": "free",
}
