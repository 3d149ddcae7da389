"""CurveZMQ: with `security.curve` on, only clients holding an authorised key
can register, pull or push; an authorised client trains normally."""
import pytest

from psgd.config import load_config
from psgd.wire.keys.curve import client_curve, server_curve
from psgd.wire.transport import TransportError


def test_missing_keys_are_a_clear_error(tmp_path):
    cfg = load_config(None, ["security.curve=true", f"security.keys_dir={tmp_path / 'nowhere'}"])
    with pytest.raises(TransportError, match="psgd keys generate"):
        server_curve(cfg)
    with pytest.raises(TransportError, match="key file not found"):
        client_curve(cfg)
