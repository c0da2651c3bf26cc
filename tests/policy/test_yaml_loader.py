"""The policy / rule-file YAML reader: libyaml's parser for speed, the pure-Python loader's
values and error messages (perfgate.policy.yamlfile)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from perfgate.errors import PolicyError
from perfgate.policy import yamlfile

ROOT = Path(__file__).resolve().parents[2]
YAML_FILES = sorted([*(ROOT / "perfgate/policies").rglob("*.yaml"), *(ROOT / "policies").rglob("*.yaml")])


def test_libyaml_is_the_fast_path_here():
    """PyPI's PyYAML wheels carry libyaml; the fast loader must be the C one on them."""
    assert yaml.__with_libyaml__
    assert issubclass(yamlfile.FastUniqueKeyLoader, yaml.CSafeLoader)


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_bundled_yaml_reads_the_same_with_both_parsers(path):
    text = path.read_text(encoding="utf-8")
    assert yamlfile.load_unique(text) == yaml.load(text, Loader=yamlfile.UniqueKeyLoader)  # noqa: S506


# each refused by both parsers; libyaml's own messages leave out what the reference names
INVALID = {
    "a: *nope\n": "found undefined alias 'nope'",
    "\tx: 1\n": "found character '\\t' that cannot start any token",
    'a: "\\q"\n': "found unknown escape character 'q'",
    "a: [1, 2\n": "expected ',' or ']', but got '<stream end>'",
    "a: b: c\n": "mapping values are not allowed here",
    "a: \x07\n": "special characters are not allowed",
    "a: 1\na: 2\n": "found duplicate key 'a'",
    "{a: 1, a: 1}\n": "found duplicate key 'a'",
}


@pytest.mark.parametrize("text", INVALID, ids=repr)
def test_refused_text_gets_the_reference_message(tmp_path, text):
    p = tmp_path / "policy.yaml"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(yaml.YAMLError):
        yaml.load(text, Loader=yamlfile.FastUniqueKeyLoader)  # noqa: S506 - libyaml refuses it too
    with pytest.raises(PolicyError) as e:
        yamlfile.read_mapping(p, "policy")
    assert INVALID[text] in str(e.value)


def test_duplicate_key_names_both_lines_with_libyaml(tmp_path):
    p = tmp_path / "policy.yaml"
    p.write_text("x: 1\ngate:\n  tolerance: 0.1\n  tolerance: 0.2\n", encoding="utf-8")
    with pytest.raises(PolicyError) as e:
        yamlfile.read_mapping(p, "policy")
    assert "first 'tolerance' at line 3" in str(e.value) and "line 4" in str(e.value)


def test_merge_keys_may_be_overridden():
    assert yamlfile.load_unique("base: &b {a: 1, c: 2}\nx:\n  <<: *b\n  a: 3\n")["x"] == {"a": 3, "c": 2}
