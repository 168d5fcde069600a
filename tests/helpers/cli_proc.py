"""``python -m ledger.cli`` as a real child process, without an interpreter's
start-up each time: a zygote interpreter (``python -m tests.helpers.cli_proc``)
imports ``ledger.cli`` once, then forks a process per invocation.

The child is what ``python -m ledger.cli ARGS`` would be from there on: its
environment and working directory are the caller's, its file descriptors 0, 1
and 2 are files the caller wrote and reads back, ``sys.stdin``/``stdout``/
``stderr`` are set up over them as a new interpreter sets them up (the zygote's
own, which a new interpreter made over pipes), ``sys.argv`` and ``sys.path[0]``
are a ``-m`` run's, and ``ledger.cli.__main__`` (or ``ledger.__main__``) runs
as ``__main__``. Its exit
status is the one the interpreter would exit with: ``SystemExit``'s code, 1 with
the traceback on stderr for an exception that escapes, 120 when flushing the
output fails. What it does not repeat is the import of the CLI's modules (each
fresh interpreter spent ~0.35 s of CPU there; the tests that need a fresh
interpreter, such as the ones about offline caches and imports, start one).

``run(argv, stdin=..., env=..., cwd=..., timeout=...)`` returns a
``subprocess.CompletedProcess`` and raises ``subprocess.TimeoutExpired`` as
``subprocess.run`` does (the child is killed).
"""

from __future__ import annotations

import io
import json
import locale
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

_lock = threading.Lock()
_zygote: subprocess.Popen[str] | None = None


def _start() -> subprocess.Popen[str]:
    from tests.helpers import subprocess_env

    return subprocess.Popen([sys.executable, "-m", "tests.helpers.cli_proc"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            cwd=REPO, env=subprocess_env())


def run(argv: list[str], *, stdin: bytes = b"", env: dict[str, str] | None = None,
        cwd: Path | str | None = None, timeout: float = 120.0, module: str = "ledger.cli"
        ) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run([python, "-m", module, *argv], input=stdin, capture_output=True,
    env=env, cwd=cwd, timeout=timeout)``, forked from the zygote; ``module``:
    ``ledger.cli`` or ``ledger`` (both ``tledger``). For ``text=True`` use ``run_text``."""
    if module not in ("ledger.cli", "ledger"):
        raise ValueError(f"cli_proc runs python -m ledger.cli or ledger, not {module!r}")
    global _zygote
    with tempfile.TemporaryDirectory(prefix="tledger-cli-") as d:
        files = {name: os.path.join(d, name) for name in ("stdin", "stdout", "stderr")}
        Path(files["stdin"]).write_bytes(stdin)
        for name in ("stdout", "stderr"):
            Path(files[name]).write_bytes(b"")
        req = {"module": module, "argv": list(argv),
               "env": dict(os.environ if env is None else env),
               "cwd": str(cwd if cwd is not None else os.getcwd()), "timeout": timeout,
               **files}
        with _lock:
            if _zygote is None or _zygote.poll() is not None:
                _zygote = _start()
            assert _zygote.stdin is not None and _zygote.stdout is not None
            _zygote.stdin.write(json.dumps(req) + "\n")
            _zygote.stdin.flush()
            line = _zygote.stdout.readline()
        if not line:
            raise RuntimeError("the tledger zygote (tests/helpers/cli_proc.py) died")
        answer = json.loads(line)
        out = Path(files["stdout"]).read_bytes()
        err = Path(files["stderr"]).read_bytes()
    args = [sys.executable, "-m", module, *argv]
    if answer.get("timeout"):
        raise subprocess.TimeoutExpired(args, timeout, output=out, stderr=err)
    return subprocess.CompletedProcess(args, int(answer["returncode"]), out, err)


def run_text(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``run`` with ``text=True``'s outputs: decoded with the locale's encoding and
    universal newlines, as ``subprocess.run`` decodes them."""
    done = run(argv, **kwargs)
    enc = locale.getpreferredencoding(False)
    return subprocess.CompletedProcess(
        done.args, done.returncode,
        *(b.decode(enc).replace("\r\n", "\n").replace("\r", "\n")
          for b in (done.stdout, done.stderr)))


# --- the zygote ------------------------------------------------------------------------


def _exit_code(exc: SystemExit) -> int:
    """What the interpreter exits with for ``exc`` (printing a non-int code)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _child(req: dict[str, Any]) -> None:
    """In the forked process: become ``python -m ledger.cli ARGV``; never returns."""
    code = 1
    try:
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        for fd, name, flags in ((0, "stdin", os.O_RDONLY), (1, "stdout", os.O_WRONLY),
                                (2, "stderr", os.O_WRONLY)):
            opened = os.open(req[name], flags)
            os.dup2(opened, fd)
            os.close(opened)
        # stdout and stderr: the zygote's (flushed before the fork), now on the files;
        # stdin anew, without what the zygote had read ahead of its requests.
        sys.stdin = io.TextIOWrapper(io.open(0, "rb", closefd=False),  # noqa: UP020
                                     encoding=sys.stdin.encoding, errors=sys.stdin.errors)
        sys.argv = ["-m", *req["argv"]]  # runpy puts the module's path first, as -m does
        sys.path[0] = os.getcwd()
        try:
            runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = _exit_code(exc)
        except BaseException:
            traceback.print_exc()
            code = 1
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            code = code or 120
    finally:
        os._exit(code)


def _wait(pid: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"returncode": os.waitstatus_to_exitcode(status)}
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"timeout": True}
        time.sleep(0.002)


def zygote() -> None:
    """Serve requests (JSON, one a line) on stdin: fork, run, answer with the status."""
    import ledger.cli

    ledger.cli.build_parser()  # the command modules, as every run loads them
    for line in sys.stdin:
        req = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(req)
        print(json.dumps(_wait(pid, float(req["timeout"]))), flush=True)


if __name__ == "__main__":
    zygote()
