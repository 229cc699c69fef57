"""Servers a command starts (MLflow UI, Prefect's API server) live in a process group of their
own and are stopped with the whole group, whether the command ends, is interrupted or killed.

A group of its own: a Ctrl-C in the terminal reaches the command only, which then stops the
server in order (a server hit by the same SIGINT would die under the command's last requests).
The whole group: ``mlflow ui`` runs uvicorn in a child process, which outlived its parent when
only the parent was signalled.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys


def die_with_parent() -> None:
    """``preexec_fn``: on Linux the process gets SIGTERM when the thread that started it ends
    (for a process started from the main thread: when the command dies, even by SIGKILL)."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def start_group(command: list[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen(command, start_new_session=True, preexec_fn=die_with_parent, **kwargs)


def stop_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM to the process group, SIGKILL to what is left after ``grace`` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if not _group_alive(proc.pid):
            break
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass


def pid_alive(pid: int) -> bool:
    return _exists(os.kill, pid)


def _group_alive(pgid: int) -> bool:
    return _exists(os.killpg, pgid)


def _exists(send, target: int) -> bool:
    try:
        send(target, 0)   # signal 0: nothing is sent, only whether it exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True       # someone else's process: it exists
    return True


def serve_until_stopped(proc: subprocess.Popen) -> int:
    """Wait for a foreground server; Ctrl-C or SIGTERM stop its whole group. Returns the exit code."""
    def on_term(signum, frame):
        raise KeyboardInterrupt(signum)

    # both, explicitly: a command started in the background of a script inherits SIGINT ignored
    previous = {s: signal.signal(s, on_term) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return proc.wait()
    except KeyboardInterrupt as err:
        signum = err.args[0] if err.args else signal.SIGINT
        return 128 + int(signum)
    finally:
        stop_group(proc)
        for s, handler in previous.items():
            signal.signal(s, handler)
