"""--resume refuses a config that no longer matches the state its checkpoints hold."""
import json

import pytest

from psgd.config import load_config
from psgd.orchestrate.records.resume_check import STATE_SHAPE_FILE, ResumeRefused, check_resumable, state_shape


def started(tmp_path, *sets):
    (tmp_path / STATE_SHAPE_FILE).write_text(json.dumps(state_shape(load_config(None, list(sets)))))


@pytest.mark.parametrize("now,named", [
    (["optimizer.name=adam"], "optimizer state was ['momentum_buffer'], is ['exp_avg', 'exp_avg_sq']"),
    (["optimizer.momentum=0"], "optimizer state was ['momentum_buffer'], is []"),
    (["optimizer.momentum=0.9", "cluster.workers=8"], "cluster.workers was 4, is 8"),
    (["optimizer.momentum=0.9", "consistency.mode=bsp"], "consistency.mode was 'asp', is 'bsp'"),
    (["optimizer.momentum=0.9", "task.model_args={hidden: 128}"], "task.model_args.hidden was 64, is 128"),
    (["optimizer.momentum=0.9", "task.model_args={}"], "task.model_args.hidden was 64, is 'unset'"),
    (["optimizer.momentum=0.9", "task.model_args={hidden: 64}", "task.dataset_args={n: 500}"],
     "task.dataset_args.n was 'unset', is 500"),
    (["optimizer.momentum=0.9", "task.model_args={hidden: 64}", "task.objective=regression"],
     "task.objective was 'auto', is 'regression'"),
])
def test_a_changed_state_shaping_key_is_refused_in_one_line(tmp_path, now, named):
    started(tmp_path, "optimizer.momentum=0.9", "task.model_args={hidden: 64}")
    with pytest.raises(ResumeRefused, match="cannot resume") as err:
        check_resumable(load_config(None, now), tmp_path)
    assert named in str(err.value) and "\n" not in str(err.value)


def test_what_does_not_shape_state_may_change(tmp_path):
    started(tmp_path, "optimizer.momentum=0.9", "optimizer.lr=0.1")
    check_resumable(load_config(None, ["optimizer.momentum=0.5", "optimizer.lr=0.01", "train.max_time_s=9"]),
                    tmp_path)
    check_resumable(load_config(None, []), tmp_path / "nowhere")  # a run from before the record: not checked


def test_a_record_from_before_the_task_keys_checks_only_what_it_holds(tmp_path):
    shape = state_shape(load_config(None, []))
    for key in ("task.model_args", "task.dataset_args", "task.objective"):
        del shape[key]
    (tmp_path / STATE_SHAPE_FILE).write_text(json.dumps(shape))
    check_resumable(load_config(None, ["task.model_args={hidden: 128}"]), tmp_path)
