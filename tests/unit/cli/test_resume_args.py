"""`psgd launch --resume` refuses what it cannot continue, before starting anything."""
from psgd.cli import main


def test_resume_needs_a_run_directory(tmp_path, capsys):
    assert main(["launch", "--resume", str(tmp_path / "nope")]) == 2
    assert "not a psgd run directory" in capsys.readouterr().err


def test_resume_takes_no_config_or_overrides(tmp_path, capsys):
    assert main(["launch", "c.yaml", "--resume", str(tmp_path)]) == 2
    assert "takes no CONFIG" in capsys.readouterr().err


def test_resume_without_checkpoints_fails_clearly(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("cluster: {servers: 1, workers: 1}\n")  # the run's own resolved config
    assert main(["launch", "--resume", str(run), "--quiet"]) == 1
    assert "no checkpoints/" in capsys.readouterr().err
