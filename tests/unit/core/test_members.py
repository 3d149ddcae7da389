"""import_members: every module of a registry package is imported, and one that
adds no member is refused by name."""
import sys

import pytest

from psgd.core.members import import_members


@pytest.fixture
def package(tmp_path, monkeypatch):
    root = tmp_path / "regpkg"
    root.mkdir()
    (root / "__init__.py").write_text("MEMBERS = []\n")
    (root / "base.py").write_text("")
    (root / "_private.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield root
    for name in [m for m in sys.modules if m == "regpkg" or m.startswith("regpkg.")]:
        del sys.modules[name]


def test_each_member_module_is_imported_and_registers(package):
    (package / "one.py").write_text("import regpkg\nclass One: pass\nregpkg.MEMBERS.append(One)\n")
    (package / "two.py").write_text("import regpkg\nclass Two: pass\nregpkg.MEMBERS.append(Two)\n")
    import regpkg
    import_members("regpkg", ("base",), lambda: regpkg.MEMBERS)
    assert sorted(m.__name__ for m in regpkg.MEMBERS) == ["One", "Two"]


def test_a_module_that_registers_nothing_is_refused_by_name(package):
    (package / "one.py").write_text("import regpkg\nclass One: pass\nregpkg.MEMBERS.append(One)\n")
    (package / "forgot.py").write_text("class Forgot: pass\n")
    import regpkg
    with pytest.raises(TypeError, match="regpkg.forgot registers no member"):
        import_members("regpkg", ("base",), lambda: regpkg.MEMBERS)
