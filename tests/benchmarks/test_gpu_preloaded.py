"""benchmarks/gpu/preloaded.py, the parts that need no process: a forked command sees the
sys.argv and sys.path[0] that `python ARGV` would give it, exits with an interpreter's status,
and a request it cannot run is refused in one line before anything is started. (The dry run
of tests/e2e/test_gpu_script_dry.py forks every check through it.)"""
import sys

import pytest
from conftest import load_script

preloaded = load_script("benchmarks/gpu/preloaded.py")

SEEN = "import sys, json\nopen({out!r}, 'w').write(json.dumps([__name__, sys.argv, sys.path[0]]))\n"


@pytest.fixture
def fresh_sys(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["pytest"])
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_a_script_sees_what_python_script_would_give_it(tmp_path, monkeypatch, fresh_sys):
    import json
    out = tmp_path / "seen.json"
    script = tmp_path / "tool" / "script.py"
    script.parent.mkdir()
    script.write_text(SEEN.format(out=str(out)))
    monkeypatch.chdir(tmp_path)
    preloaded._run_as_python(["tool/script.py", "--flag", "x"])
    assert json.loads(out.read_text()) == ["__main__", ["tool/script.py", "--flag", "x"], str(script.parent)]


def test_a_module_sees_what_python_m_would_give_it(tmp_path, monkeypatch, fresh_sys):
    import json
    out = tmp_path / "seen.json"
    (tmp_path / "a_tool_module.py").write_text(SEEN.format(out=str(out)))
    monkeypatch.chdir(tmp_path)  # `python -m` looks in the working folder first
    preloaded._run_as_python(["-m", "a_tool_module", "--flag"])
    sys.modules.pop("a_tool_module", None)
    assert json.loads(out.read_text()) == ["__main__", [str(tmp_path / "a_tool_module.py"), "--flag"], str(tmp_path)]


@pytest.mark.parametrize("code, status", [(None, 0), (0, 0), (3, 3), ("a message", 1)])
def test_exit_status_is_the_interpreters(code, status, capsys):
    assert preloaded._exit_status(SystemExit(code)) == status
    assert capsys.readouterr().err == ("a message\n" if isinstance(code, str) else "")


@pytest.mark.parametrize("argv", [["-c", "pass"], ["-m"], ["-B", "x.py"]])
def test_what_it_cannot_run_is_refused_in_one_line(argv, capsys):
    assert preloaded.main(["run", "no-such-server", *argv]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "runs `SCRIPT ARGS` or `-m MODULE ARGS`" in err


@pytest.mark.parametrize("args", [[], ["serve"], ["wait", "name", "not-a-pid"], ["run", "name"], ["go", "name"]])
def test_bad_usage_says_the_usage(args, capsys):
    assert preloaded.main(args) == 2
    assert capsys.readouterr().err.startswith("usage: preloaded.py serve NAME")
