"""summary.json's final setting and list of live changes (psgd.orchestrate.records.setting_history)."""
from psgd.config import load_config
from psgd.orchestrate.records.setting_history import setting_history


def _change(clock: int, setting: dict, origin: str = "ctl", index: int = 0) -> dict:
    return {"event": "setting_change", "role": "server", "index": index, "effective_clock": clock, "origin": origin,
            "changes": {}, "setting": setting}


def test_changes_are_listed_in_clock_order_with_old_and_new(tmp_path):
    (tmp_path / "c.yaml").write_text("consistency: {mode: ssp, staleness: 2}\noptimizer: {lr: 0.1}\n")
    cfg = load_config(tmp_path / "c.yaml")
    # Each event carries the whole setting from its clock on (LiveSetting.as_dict).
    events = [_change(120, {"mode": "asp", "staleness": 4, "bound": 4, "lr": 0.05}),
              _change(120, {"mode": "asp", "staleness": 4, "bound": 4, "lr": 0.05}, index=1),  # shard 1: the same
              _change(40, {"mode": "ssp", "staleness": 4, "bound": 4, "lr": 0.05}, origin="auto")]
    final, changes = setting_history(cfg, events)
    assert final == {"mode": "asp", "staleness": 4, "lr": 0.05}
    assert changes == [
        {"clock": 40, "origin": "auto", "key": "consistency.staleness", "old": 2, "new": 4},
        {"clock": 40, "origin": "auto", "key": "optimizer.lr", "old": 0.1, "new": 0.05},
        {"clock": 120, "origin": "ctl", "key": "consistency.mode", "old": "ssp", "new": "asp"}]


def test_a_run_without_changes_has_no_final_setting(tmp_path):
    (tmp_path / "c.yaml").write_text("consistency: {mode: asp}\n")
    assert setting_history(load_config(tmp_path / "c.yaml"), [{"event": "eval", "t": 1.0}]) == (None, [])
