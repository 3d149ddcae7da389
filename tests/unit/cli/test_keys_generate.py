"""`psgd keys generate`: private secrets, and an existing key pair kept unless --force."""
import os
import stat

from conftest import one_clear_line

from psgd.cli import main


def test_keys_generate_refuses_to_overwrite_and_secrets_are_private(tmp_path, capsys):
    keys = tmp_path / "keys"
    assert main(["keys", "generate", str(keys)]) == 0
    before = (keys / "server.key_secret").read_bytes()
    assert stat.S_IMODE(os.stat(keys / "server.key_secret").st_mode) == 0o600
    capsys.readouterr()
    assert main(["keys", "generate", str(keys)]) == 2
    assert "--force" in one_clear_line(capsys.readouterr().err)
    assert (keys / "server.key_secret").read_bytes() == before
    assert main(["keys", "generate", str(keys), "--force"]) == 0
    assert (keys / "server.key_secret").read_bytes() != before
