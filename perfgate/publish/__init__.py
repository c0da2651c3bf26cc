"""Publishing a gate result where people read it: the GitHub pull request (one sticky comment
per key), the Actions job summary and step outputs. Side effects live here, never in
:mod:`perfgate.report` (which only returns strings)."""
from perfgate.publish.github import (
    ActionsContext, CommentOutcome, PublishError, append_step_summary, context_from_env, fit_comment,
    publish_report, redact, upsert_comment, write_outputs,
)

__all__ = ["ActionsContext", "CommentOutcome", "PublishError", "append_step_summary", "context_from_env",
           "fit_comment", "publish_report", "redact", "upsert_comment", "write_outputs"]
