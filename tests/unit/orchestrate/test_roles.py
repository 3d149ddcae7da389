"""The one role table: every role has a CLI command, and children start on the run's config.yaml."""
import sys

from psgd.cli import build_parser
from psgd.orchestrate.roles import CONFIG_FILE, ROLES, child_command


def test_every_role_is_a_cli_command_with_its_index_flag(tmp_path):
    parser = build_parser()
    for name, spec in ROLES.items():
        args = parser.parse_args([name, "c.yaml", spec.index_flag, "3"])
        assert (args.command, args.index, args.config) == (name, 3, "c.yaml")


def test_children_read_the_resolved_config_of_the_run_directory(tmp_path):
    cmd = child_command("server", 1, tmp_path)
    assert cmd[:4] == [sys.executable, "-m", "psgd.cli", "server"]
    assert cmd[4] == str(tmp_path / CONFIG_FILE)
    assert cmd[5:] == ["--shard", "1", "--run-dir", str(tmp_path), "--supervised"]
    assert "--set" not in cmd  # nothing is re-parsed from the user's original config or overrides
