"""Small facts about processes the bundled runtime needs: is one alive, and tying a child's
life to its parent's (Linux asks the kernel; elsewhere the runtime's own checks do it); and
ending an asyncio child so that it is reaped before its event loop closes."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

_PR_SET_PDEATHSIG = 1
REAP_SECONDS = 30.0  # a killed child is reaped at once; the bound only guards a stuck kernel
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


async def reap(
    proc: asyncio.subprocess.Process, *, grace: float = 0.0, group: bool = False
) -> None:
    """End an asyncio child and wait until it is reaped: after ``grace`` seconds to end by
    itself, kill it (``group``: with every process of its group, for a child started in a
    session of its own), close Conch's ends of its pipes and wait for its exit status.

    A child asyncio reaps only later may be collected after its event loop closed, when
    nothing can reap it any more, and Python then warns it is "still running". Waiting for the
    status (not for the pipes: a grandchild may hold them) makes the reap happen here.
    """
    try:
        if proc.returncode is None and grace > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), grace)
    finally:
        killpg = getattr(os, "killpg", None)
        if group and killpg is not None:
            # The group outlives its first process while anything it started lives; Linux
            # does not give its number to another process before the group is gone.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                killpg(proc.pid, signal.SIGKILL)
        elif proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        transport = getattr(proc, "_transport", None)  # asyncio.subprocess.Process keeps it here
        for fd in (0, 1, 2):
            pipe = transport.get_pipe_transport(fd) if transport is not None else None
            if pipe is not None:
                pipe.close()
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), REAP_SECONDS)
        if group:
            # SIGKILL is delivered at once but acted on when each process next runs: on a busy
            # machine a grandchild can still be running a moment after the child is reaped.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_group_ended(proc.pid), REAP_SECONDS)
    finally:
        close_transport(proc)


def _group_members(group: int) -> list[int]:
    """The processes of process group ``group`` that have not ended (Linux; elsewhere none)."""
    members: list[int] = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text(errors="replace")
            except OSError:
                continue
            # "pid (comm) state ppid pgrp ...": after the last ")", state is field 0, pgrp 2.
            fields = stat.rsplit(")", 1)[-1].split()
            if len(fields) > 2 and fields[2] == str(group) and fields[0] not in ("Z", "X"):
                members.append(int(entry.name))
    return members


async def _group_ended(group: int) -> None:
    """Wait until every process of ``group`` has ended (a zombie has): a pidfd of each turns
    readable when it ends (Linux 5.3 on; without pidfds this returns at once)."""
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None:
        return
    loop = asyncio.get_running_loop()
    for pid in _group_members(group):
        try:
            fd = pidfd_open(pid)
        except OSError:  # already gone, or pidfds refused here
            continue
        try:
            ended: asyncio.Future[None] = loop.create_future()

            def readable(future: asyncio.Future[None] = ended) -> None:
                if not future.done():
                    future.set_result(None)

            loop.add_reader(fd, readable)
            try:
                await ended
            finally:
                loop.remove_reader(fd)
        finally:
            os.close(fd)


# --- how a process ended, in words (the runtime's crash notes, a tool server's) ---------------


def signal_number(name: str) -> int | None:
    found = getattr(signal, name, None)
    return int(found) if found is not None else None


# What a person reads for each way a process can die; SIGKILL from nobody they know of is
# usually the kernel's out-of-memory killer.
_SIGNAL_WORDS: dict[int, str] = {
    number: words
    for name, words in (
        ("SIGILL", "stopped (illegal instruction)"),
        ("SIGSEGV", "crashed (segmentation fault)"),
        ("SIGKILL", "was killed (often: out of memory)"),
        ("SIGABRT", "aborted"),
        ("SIGBUS", "crashed (bus error)"),
        ("SIGFPE", "crashed (arithmetic error)"),
        ("SIGTERM", "was stopped by another program"),
    )
    if (number := signal_number(name)) is not None
}


def ending_words(returncode: int) -> str:
    """How a process ended, in words: "stopped (illegal instruction)", "exited with code 1"."""
    if returncode < 0:
        number = -returncode
        known = _SIGNAL_WORDS.get(number)
        if known is not None:
            return known
        try:
            return f"stopped ({signal.Signals(number).name})"
        except ValueError:
            return f"stopped (signal {number})"
    return f"exited with code {returncode}"
