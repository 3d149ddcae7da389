"""An error a command expects ends it with one line and its exit code; others propagate."""
import pytest

from psgd.cli import main
from psgd.cli.failures import CommandFailed, Fail, expected
from psgd.config import ConfigError
from psgd.runtime.role import EXIT_NO_RETRY, RoleFailed


def test_the_first_matching_case_gives_the_line_and_the_code():
    with pytest.raises(CommandFailed) as caught:
        with expected("psgd x", Fail(KeyError, 3), Fail(ValueError, 2, "bad {}; nothing was started")):
            raise ConfigError("cluster.workers", "must be >= 1")  # a ValueError
    assert caught.value.code == 2
    assert caught.value.line == "psgd x: bad cluster.workers: must be >= 1; nothing was started"


def test_a_case_without_a_code_takes_the_exceptions_own():
    failed = RoleFailed("the checkpoint is damaged", retry=False)
    with pytest.raises(CommandFailed) as caught:
        with expected("psgd run", Fail(RoleFailed)):
            raise failed
    assert caught.value.code == failed.exit_code == EXIT_NO_RETRY


def test_an_unexpected_error_propagates_unchanged():
    with pytest.raises(KeyError, match="shard"):
        with expected("psgd x", Fail(ValueError, 2)):
            raise KeyError("shard")


def test_main_prints_the_line_and_returns_the_code(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: {workers: 0}\n")
    assert main(["eval", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("psgd eval: ") and "cluster.workers" in err[0]
