"""Reading the YAML rule files (policy, segment knowledge): one place for the errors.

Layer: just above errors/terms (imports only :mod:`perfgate.errors`), below knowledge and policy.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from perfgate.errors import PolicyError


class _UniqueKeys:
    """Refuses a mapping holding the same key twice (plain PyYAML keeps the last one silently: a
    policy's second ``tolerance:`` would quietly replace the first). Keys brought in by a ``<<``
    merge may be overridden, as YAML allows. Mixed into both loaders below."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    continue   # the base constructor reports an unhashable key
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        f"while constructing a mapping (first {key!r} at line {seen[key].line + 1})",
                        node.start_mark, f"found duplicate key {key!r}", key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


class UniqueKeyLoader(_UniqueKeys, yaml.SafeLoader):
    """PyYAML's pure-Python SafeLoader refusing duplicate keys: the reference, whose error
    messages name the offending character, alias or escape (libyaml's omit them)."""


#: libyaml's parser where PyYAML was built with it (every PyPI wheel is) under the same Python
#: SafeConstructor: ~9x faster on the built-in policy and segment rules (44 -> 5 ms warm, about
#: 0.15 s less per fresh ``perfgate check``). Falls back to the reference without libyaml.
FastUniqueKeyLoader = (type("FastUniqueKeyLoader", (_UniqueKeys, yaml.CSafeLoader), {})
                       if hasattr(yaml, "CSafeLoader") else UniqueKeyLoader)


def load_unique(text: str):
    """``yaml.safe_load`` that refuses duplicate mapping keys: parsed by libyaml
    (:data:`FastUniqueKeyLoader`); a text it refuses is parsed again by the pure-Python
    :class:`UniqueKeyLoader`, so the error raised (and its message) is the reference's.

    Raises:
        yaml.YAMLError: invalid YAML or a duplicate key (the reference loader's error)."""
    try:
        return yaml.load(text, Loader=FastUniqueKeyLoader)   # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError:
        if FastUniqueKeyLoader is UniqueKeyLoader:
            raise
    return yaml.load(text, Loader=UniqueKeyLoader)   # noqa: S506 - raises the reference's error


def read_mapping(path: Path, what: str) -> dict:
    """Parse ``path`` as a YAML mapping.

    Raises:
        PolicyError: unreadable file, not UTF-8 (the byte named), invalid YAML, or a document
            that is not a mapping, or a mapping with a duplicate key (the line and key named;
            ``what`` names the file kind in the message).
    """
    try:
        doc = load_unique(Path(path).read_text(encoding="utf-8"))
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
