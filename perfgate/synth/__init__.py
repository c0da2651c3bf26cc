"""Synthetic, schema-faithful ASCEND_PROFILER_OUTPUT captures and consistent mutations of
real ones, for tests, demos and benchmarks."""
from perfgate.synth.writer import SynthSpec, pipeline_spec, write_capture, write_demo_pair

__all__ = ["SynthSpec", "pipeline_spec", "write_capture", "write_demo_pair"]
