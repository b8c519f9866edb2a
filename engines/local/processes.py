"""Small facts about processes the bundled runtime needs: is one alive, and tying a child's
life to its parent's (Linux asks the kernel; elsewhere the runtime's own checks do it)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_STILL_ACTIVE = 259  # what Windows reports as the exit code of a process still running


def alive(pid: int) -> bool:
    """Whether process ``pid`` is running (a zombie, finished but not yet reaped, is not)."""
    if pid <= 0:
        return False
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():
        try:
            # "pid (comm) S ..." — a zombie has finished; only its parent has not reaped it.
            return stat.read_text(errors="replace").rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False
    if sys.platform == "win32":
        return _alive_on_windows(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return True


def _alive_on_windows(pid: int) -> bool:
    # os.kill(pid, 0) would end the process there (it calls TerminateProcess).
    if sys.platform == "win32":
        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return ctypes.get_last_error() == 5  # access denied: it exists
        try:
            code = ctypes.c_ulong()
            if not kernel32.GetExitCodeProcess(handle, ctypes.byref(code)):
                return False
            return code.value == _STILL_ACTIVE
        finally:
            kernel32.CloseHandle(handle)
    return False


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def death_signal_hook() -> Callable[[], None] | None:
    """A preexec function that makes the kernel kill the child when its parent dies (Linux).

    Prepared before the fork: the child only calls a ready function pointer. The signal comes
    when the *thread* that started the child ends, so start it on a thread that lives as long
    as the parent (the event loop's own thread; never inside ``to_thread``).
    """
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl
            os._exit(1)

    return hook


def die_with(parent: int) -> None:
    """In a process just forked from ``parent``: be killed when it dies (Linux only)."""
    hook = _prctl()
    if hook is not None:
        hook(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def close_transport(proc: object) -> None:
    """Close an asyncio subprocess's transport once Conch is done with the child.

    asyncio closes it only when the child has exited *and* its pipes are closed; a grandchild
    holding the pipes, or a reap that comes late on a busy machine, leaves it open until the
    garbage collector finds it and warns. Closing it kills a child still running.
    """
    transport = getattr(proc, "_transport", None)  # asyncio.subprocess.Process keeps it here
    close = getattr(transport, "close", None)
    if callable(close):
        close()
