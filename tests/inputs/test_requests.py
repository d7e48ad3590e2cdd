"""The Mooncake JSONL request trace: read as documented, every bad line one error."""

from __future__ import annotations

import pytest

from topomodel.errors import InputError
from topomodel.inputs.measured.requests import read_mooncake_trace


def _write(tmp_path, text):
    path = tmp_path / "trace.jsonl"
    path.write_text(text)
    return path


def test_reads_arrivals_lengths_and_rate(tmp_path):
    path = _write(tmp_path, '{"timestamp": 0, "input_length": 6755, "output_length": 500,'
                            ' "hash_ids": [0, 1]}\n\n'
                            '{"timestamp": 0, "input_length": 7319, "output_length": 490}\n'
                            '{"timestamp": 3052, "input_length": 2287, "output_length": 316}\n')
    trace = read_mooncake_trace(path)
    assert trace.requests == 3 and trace.arrival_s.tolist() == [0.0, 0.0, 3.052]
    assert trace.input_tokens.tolist() == [6755, 7319, 2287]
    assert trace.output_tokens.tolist() == [500, 490, 316]
    assert trace.rate_rps == pytest.approx(2 / 3.052)


def test_all_at_once_has_no_rate(tmp_path):
    path = _write(tmp_path, '{"timestamp": 5, "input_length": 1, "output_length": 1}\n')
    assert read_mooncake_trace(path).rate_rps is None


@pytest.mark.parametrize(("text", "message"), [
    ('{"timestamp": 0, "input_length": 10}\n', r"trace.jsonl:1: output_length: missing"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 0}\n',
     r"trace.jsonl:1: output_length: expected a whole number of tokens from 1, got 0"),
    ('{"timestamp": 0, "input_length": "10", "output_length": 1}\n',
     r"trace.jsonl:1: input_length: expected a whole number"),
    ('{"timestamp": -1, "input_length": 10, "output_length": 1}\n',
     r"trace.jsonl:1: timestamp: expected milliseconds from 0"),
    ('{"timestamp": 9, "input_length": 1, "output_length": 1}\n'
     '{"timestamp": 3, "input_length": 1, "output_length": 1}\n',
     r"trace.jsonl:2: timestamp: 3 ms is earlier than the line before"),
    ("{not json\n", r"trace.jsonl:1: not JSON"),
    ("[1, 2]\n", r"trace.jsonl:1: expected a JSON object a line"),
    ("\n", r"trace.jsonl: no requests in the trace"),
])
def test_bad_lines_are_one_error_naming_file_line_and_key(tmp_path, text, message):
    with pytest.raises(InputError, match=message) as err:
        read_mooncake_trace(_write(tmp_path, text))
    assert len(str(err.value).splitlines()) == 1


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="cannot read the trace"):
        read_mooncake_trace(tmp_path / "none.jsonl")
