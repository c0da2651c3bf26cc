"""A communication.json cut short (the export did not finish) is diagnosed as trace_view.json is:
"truncated JSON: the file ends at byte N inside an unfinished value", exit 3 with the byte
offset, nothing written to baselines or history (it said "invalid JSON:
Unterminated string starting at" at the byte where the last string began). A wrong byte in a
complete file keeps its "invalid JSON" message."""
import json

import pytest

from _refusals import assert_refused_everywhere
from perfgate.errors import InvalidCaptureError
from perfgate.ingest.comm import read_communication
from perfgate.ingest.jsonscan import ends_unfinished
from perfgate.synth import SynthSpec, write_capture

OUT0 = "rank0_ascend_pt/ASCEND_PROFILER_OUTPUT"

# every kind of JSON token, non-ASCII text and escapes, so the cuts fall inside each of them
_DOC = json.dumps({"step1": {"collective": {"hcom_allReduce__é12_0_1@7": {
    "Communication Time Info": {"Start Timestamp(us)": 1.7e15, "Elapse Time(ms)": 0.25, "Wait Time(ms)": 0,
                                "x": [True, False, None, -1.5e-3, "a\\\"b\u0001\u00e9\U0001f600"]}}}}},
                  ensure_ascii=False).encode()


def _loads_error(data: bytes) -> ValueError:
    try:
        json.loads(data)
    except ValueError as e:
        return e
    raise AssertionError(f"{data!r} parsed")


def test_every_cut_of_a_document_ends_unfinished():
    for n in range(1, len(_DOC)):
        cut = _DOC[:n]
        try:
            json.loads(cut)
        except ValueError as e:
            assert ends_unfinished(cut, e), (n, cut[-20:], e)


@pytest.mark.parametrize("text", [b'{"a": 1}}', b'{"a": xx}', b'{"a": "\x01"}', b'{"a" 1}', b'{"a": .',
                                  b'{"a": tru}', b'{"a": "\\uzz12"}', b'{"a": "\xff"}', b'[1, 2,]'])
def test_a_wrong_byte_is_not_a_cut(text):
    assert not ends_unfinished(text, _loads_error(text))


@pytest.fixture
def env(tmp_path):
    from _refusals import saved_main
    return tmp_path, saved_main(write_capture(tmp_path / "base", SynthSpec(seed=1, steps=2)), tmp_path / "bl")


@pytest.mark.parametrize("where", [0.5, 0.13, 0.999])
def test_a_truncated_communication_json_says_truncated(tmp_path, where):
    cap = write_capture(tmp_path / "c", SynthSpec(seed=4))
    f = cap / OUT0 / "communication.json"
    data = f.read_bytes()
    n = int(len(data) * where)
    f.write_bytes(data[:n])
    with pytest.raises(InvalidCaptureError) as e:
        read_communication(f)
    assert e.value.byte_offset == n
    assert f"truncated JSON: the file ends at byte {n} inside an unfinished value" in str(e.value)


def test_a_truncated_communication_json_is_refused_by_every_command(env):
    tmp, bl = env
    cap = write_capture(tmp / "cand", SynthSpec(seed=2, steps=2))
    f = cap / OUT0 / "communication.json"
    data = f.read_bytes()
    f.write_bytes(data[:len(data) // 2])
    needle = f"{OUT0}/communication.json byte {len(data) // 2}: truncated JSON: the file ends at byte"
    assert_refused_everywhere(cap, bl, tmp, needle)


def test_a_wrong_byte_in_a_whole_communication_json_stays_invalid_json(tmp_path):
    cap = write_capture(tmp_path / "c", SynthSpec(seed=4))
    f = cap / OUT0 / "communication.json"
    data = f.read_bytes()
    i = data.index(b":")
    f.write_bytes(data[:i] + b";" + data[i + 1:])
    with pytest.raises(InvalidCaptureError, match="invalid JSON") as e:
        read_communication(f)
    assert "truncated" not in str(e.value)


@pytest.mark.parametrize("which", ["profiler_info", "profiler_metadata"])
def test_a_truncated_rank_json_says_truncated(tmp_path, which):
    """profiler_info_<N>.json / profiler_metadata.json cut short said "invalid JSON" (helper's
    leftover): the same "truncated JSON" wording as communication.json and trace_view.json."""
    from perfgate.ingest import discover
    cap = write_capture(tmp_path / "c", SynthSpec(ranks=2, steps=2, seed=1))
    f = next((cap / "rank1_ascend_pt").glob(f"{which}*.json"), None)
    if f is None:
        f = cap / "rank1_ascend_pt" / f"{which}.json"
        f.write_text('{"distributed_args": {"world_size": 2}}')
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidCaptureError, match="truncated JSON: the file ends at byte") as e:
        discover(cap)
    assert e.value.byte_offset == len(data) // 2 and str(e.value.path).endswith(f.name)


def test_invalid_json_offsets_count_bytes_not_characters(tmp_path):
    """The decoder's position counts characters; the error names a byte offset (helper's leftover)."""
    from perfgate.ingest.jsonscan import load_error
    data = '{"名前": 1,, "x": 2}'.encode()
    try:
        json.loads(data)
    except ValueError as err:
        e = load_error(tmp_path / "f.json", data, err)
    assert "invalid JSON" in e.message and data[e.byte_offset:e.byte_offset + 1] == b","
