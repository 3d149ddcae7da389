"""How a command ends on an error it expects: one line on stderr, an exit code, no traceback.

    with expected("psgd eval", Fail(ConfigError, 2), Fail(RoleFailed, 1)):
        result = evaluate_servers(cfg)

turns those exceptions into CommandFailed, which `psgd.cli.main` prints and
returns; anything else propagates as before.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional, Union

__all__ = ["CommandFailed", "Fail", "expected"]


class CommandFailed(Exception):
    def __init__(self, code: int, line: str):
        super().__init__(line)
        self.code, self.line = code, line


@dataclass(frozen=True)
class Fail:
    kinds: Union[type[BaseException], tuple[type[BaseException], ...]]
    code: Optional[int] = None  # None: the exception's own `exit_code` (RoleFailed's)
    line: str = "{}"            # the message after "COMMAND: ", `{}` standing for the exception


@contextmanager
def expected(command: str, *fails: Fail) -> Iterator[None]:
    """Within: an exception one of `fails` names (the first that matches) ends `command`."""
    try:
        yield
    except BaseException as exc:
        for f in fails:
            if isinstance(exc, f.kinds):
                code = f.code if f.code is not None else exc.exit_code
                raise CommandFailed(code, f"{command}: {f.line.replace('{}', str(exc))}") from None
        raise
