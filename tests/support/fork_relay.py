"""`python -S fork_relay.py ARGS...`: run `psgd ARGS...` forked from the test fork server
(fork_server.py) in place of a fresh interpreter, for a launcher that starts its own ranks
(torchrun): the rank starts this stdlib-only relay, which hands the server its
environment, working directory and standard descriptors, forwards SIGTERM and SIGINT
to the forked command, and exits as it did. The server's socket is named by
$PSGD_TEST_FORK_SERVER. The command reads the launcher's variables (RANK, MASTER_ADDR, ...)
when it runs, not at import, so the forked `main` sees what a fresh one would.
"""
import json
import os
import signal
import socket
import sys
import time

SERVER_VAR = "PSGD_TEST_FORK_SERVER"


def _connect(path: str, timeout: float = 120.0) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:  # the server may still be importing torch
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main() -> None:
    env = dict(os.environ)
    path = env.pop(SERVER_VAR)
    sock = _connect(path)
    request = {"args": sys.argv[1:], "cwd": os.getcwd(), "env": env}
    socket.send_fds(sock, [json.dumps(request).encode()], [0, 1, 2])
    lines = sock.makefile("r")
    pid = int(lines.readline())

    def forward(sig, _frame):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    line = lines.readline()
    code = int(line) if line.strip() else -signal.SIGKILL  # the server died with it
    if code < 0:  # ended by a signal: so does the relay, as the command's own process would
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
