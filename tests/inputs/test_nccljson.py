"""The reader of nccl-tests' -J JSON (inputs/measured/nccljson.py): the layout of
src/util.cu (JSON file version 3) into the text reader's records; bad files refused."""

import json

import pytest

from topomodel.calibrate.inputs import input_kind, read_inputs
from topomodel.inputs.measured.nccljson import parse_nccl_json
from topomodel.inputs.measured.nccltests import LogError

JSON_RUN = {
    "version": 3, "args": ["./build/all_reduce_perf", "-b", "256M", "-e", "1G", "-g", "4"],
    "env": ["NCCL_ALGO=Ring"], "nccl_version": 22807,
    "config": {"nthreads": 1, "ngpus": 4, "minimum_bytes": 268435456,
               "maximum_bytes": 1073741824, "step_factor": 2,
               "devices": [{"rank": r, "group": 0, "pid": 1, "hostname": "h", "device": r,
                            "device_hex": f"0000:8{r}:00", "device_info": "GPU"}
                           for r in range(4)]},
    "results": [{"size": 268435456, "count": 67108864, "type": "float", "redop": "sum",
                 "root": "    -1",
                 "out_of_place": {"time": 15654.0, "alg_bw": 17.15, "bus_bw": 25.72,
                                  "nwrong": 0},
                 "in_place": {"time": 15658.0, "alg_bw": 17.14, "bus_bw": 25.72,
                              "nwrong": 0},
                 "actual_iterations": 20, "experiment_name": ""}],
    "out_of_bounds": {"count": 0, "okay": "true"},
    "average_bus_bandwidth": {"bandwidth": 25.72, "okay": "unchecked"},
}


def test_json_reader_reads_the_same_records(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(JSON_RUN))
    assert input_kind(path).name == "nccl-tests json"
    log = read_inputs([path])["nccl-tests"][0]
    assert log.test == "all_reduce_perf" and len(log.ranks) == 4
    assert log.rows[0].out_of_place.time_s == pytest.approx(15654e-6)
    assert log.rows[0].root == -1 and log.launch.nccl == {"NCCL_ALGO": "Ring"}
    assert log.out_of_bounds == 0 and log.step == "2(factor)"


def test_json_run_cycles_are_split(tmp_path):
    run = json.loads(json.dumps(JSON_RUN))
    run["args"] += ["-N", "2"]
    run["results"].append(dict(run["results"][0]))
    log = parse_nccl_json(json.dumps(run))
    assert len(log.rows) == 1 and len(log.cycles) == 1 and len(log.all_rows) == 2
    del run["args"][-2:]
    with pytest.raises(LogError, match="appears twice"):
        parse_nccl_json(json.dumps(run))


@pytest.mark.parametrize(("text", "match"), [
    ('{"results": [', "not JSON"),
    ('{"version": 3}', "no 'results' list"),
    ('{"results": [{"size": 8, "count": 2, "out_of_place": {"time": "nan",'
     ' "alg_bw": 0, "bus_bw": 0}}]}', r"results\[0\]"),
    ('{"results": []}', "no results"),
])
def test_json_reader_refuses_bad_files(text, match):
    with pytest.raises(LogError, match=match):
        parse_nccl_json(text, file="x.json")
