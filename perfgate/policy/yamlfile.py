"""Reading the YAML rule files (policy, segment knowledge): one place for the errors.

Layer: just above errors/terms (imports only :mod:`perfgate.errors`), below knowledge and policy.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from perfgate.errors import PolicyError


def read_mapping(path: Path, what: str) -> dict:
    """Parse ``path`` as a YAML mapping.

    Raises:
        PolicyError: unreadable file, not UTF-8 (the byte named), invalid YAML, or a document
            that is not a mapping (``what`` names the file kind in the message).
    """
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise PolicyError(f"not UTF-8 text (byte {e.start})", path=path) from None
    except OSError as e:
        raise PolicyError(f"cannot read {what}: {e.strerror}", path=path) from None
    except yaml.YAMLError as e:
        # the text was parsed, not the file: PyYAML names it "<unicode string>"; name the line
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        what = " ".join(x for x in (getattr(e, "context", None), getattr(e, "problem", None)) if x) or str(e)
        raise PolicyError(f"invalid YAML{where}: {what}", path=path) from None
    if not isinstance(doc, dict):
        raise PolicyError(f"{what} must be a YAML mapping", path=path)
    return doc
