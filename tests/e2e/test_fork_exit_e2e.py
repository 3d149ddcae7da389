"""A child forked from the launcher (psgd.orchestrate.fork, also what the test suite's fork
server runs its commands in) ends with the status an exec'd interpreter gives the same
`main` ending: a return value, sys.exit with a number, with nothing, with a message, or an
uncaught exception."""
import subprocess
import sys

import pytest

from psgd.orchestrate.fork import fork_child

pytestmark = pytest.mark.e2e

ENDINGS = ["return 3", "raise SystemExit", "raise SystemExit(None)", "raise SystemExit(4)",
           "raise SystemExit('bad config')", "raise ValueError('broken')"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("ending", ENDINGS)
def test_a_forked_child_ends_as_an_interpreter_would(tmp_path, ending, capsys):
    source = f"def main(argv):\n    {ending}\n"
    scope: dict = {}
    exec(source, scope)
    log = tmp_path / "child.log"
    with capsys.disabled():  # the child's sys.stderr is then fd 2, as in a launcher, not pytest's capture
        code = fork_child(scope["main"], [], log, {}).wait(timeout=30)
    ref = subprocess.run([sys.executable, "-c", source + "import sys\nsys.exit(main([]))"],
                         capture_output=True, text=True, timeout=30)
    assert code == ref.returncode
    for said in ("bad config", "ValueError: broken"):  # what the interpreter prints, the child logs
        assert (said in log.read_text()) == (said in ref.stderr)
