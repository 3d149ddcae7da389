"""The benchmarks' device paths refuse a GPU that is not there: one line, exit 2, before
any process starts (in-process, so the process guard would catch one);
benchmarks/gpu/run.sh runs the same commands on a GPU."""
import pytest
import torch

from psgd.cli import main


@pytest.mark.skipif(torch.cuda.is_available(), reason="asks for a GPU that is missing")
@pytest.mark.parametrize("args", [["bench", "comm", "--device", "cuda", "--sizes", "64KB", "--shards", "1"],
                                  ["bench", "overlap", "--device", "cuda", "--size", "64KB"]])
def test_bench_device_paths_refuse_a_gpu_that_is_not_there(capsys, args):
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == f"psgd bench {args[1]}: --device cuda: torch sees no CUDA device here"
