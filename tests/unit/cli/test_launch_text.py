"""What `psgd launch` prints at the end."""

from psgd.cli.launch_text import launch_result_lines
from psgd.orchestrate.launchers import LaunchResult

SUMMARY = {"mode": "asp", "final_test_accuracy": 0.95543, "wall_time_s": 7.112, "total_updates": 2000,
           "updates_per_s": 281.2, "time_to_target_s": 2.0186, "staleness_mean": 2.79, "staleness_max": 11,
           "max_clock_gap": 40}


def test_a_finished_run_reports_times_in_seconds(tmp_path):
    [line] = launch_result_lines(LaunchResult(0, "ok", tmp_path, SUMMARY), tmp_path)
    assert line.startswith("done: asp accuracy 0.9554 in 7.11 s, 2000 updates (281.2 updates/s), "
                           "time to target 2.02 s,")
    [line] = launch_result_lines(LaunchResult(0, "ok", tmp_path, {**SUMMARY, "time_to_target_s": None}), tmp_path)
    assert "time to target not reached," in line


def test_a_stopped_run_with_checkpoints_says_how_to_resume(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    result = LaunchResult(130, "stopped by signal SIGINT", tmp_path, SUMMARY)
    assert launch_result_lines(result, tmp_path) == [f"psgd launch: failed: stopped by signal SIGINT (logs in "
                                                     f"{tmp_path / 'logs'})"]  # nothing to resume from yet
    (tmp_path / "checkpoints" / "shard-0.pt").write_bytes(b"x")
    assert launch_result_lines(result, tmp_path)[1] == ("psgd launch: the servers' checkpoints are kept; continue "
                                                        f"this run with: psgd launch --resume {tmp_path}")



def test_the_done_line_gives_the_bound_in_clocks_and_every_live_change(tmp_path):
    ssp = {**SUMMARY, "mode": "ssp", "staleness": 2, "staleness_max": 9, "max_clock_gap": 2}
    [line] = launch_result_lines(LaunchResult(0, "ok", tmp_path, ssp), tmp_path)
    assert line.startswith("done: ssp (bound 2 clocks) accuracy 0.9554 in 7.11 s,")
    assert "staleness mean 2.79 max 9 (updates), max clock gap 2 (clocks)" in line
    changed = {**ssp, "final_setting": {"mode": "asp", "staleness": 2, "lr": 0.1},
               "setting_changes": [{"clock": 120, "origin": "ctl", "key": "consistency.mode", "old": "ssp",
                                    "new": "asp"}]}
    [line] = launch_result_lines(LaunchResult(0, "ok", tmp_path, changed), tmp_path)
    assert line.startswith("done: asp, lr 0.1 at the end, started ssp (bound 2 clocks); changes: clock 120: "
                           "consistency.mode ssp -> asp (ctl); accuracy 0.9554")
