"""A fork server for the tests' Python processes: one process imports the package and the libraries its commands
use, once, and forks a child for each command line, so that a test's process starts in a fraction of a second instead
of paying those imports (seconds of CPU) again.

`python fork_server.py serve SOCKET PID` imports, then listens on the Unix socket SOCKET until process PID ends;
`serve SOCKET PID --without-the-package` imports only torch and transformers' model and pipeline code, for processes in
which a test blocks the package's import (`sys.modules["hf_bahdanau"] = None`) as if it were not installed.
`python -S fork_server.py run SOCKET -m MODULE ARG...` (or `SCRIPT ARG...`, or `-c CODE ARG...`) is what a test
starts in place of `python -m MODULE ARG...`: it hands its open descriptors (standard input, output and error, and
any other it inherited, at their numbers), its environment and folder to the server, whose child runs the module
(script, code) on them as `python` would; it passes the signals it gets on to that child and exits as the child does
(with its status, or killed by its signal). A real process with real descriptors and signals, only started warm: what
a fresh interpreter imports is test_startup.py's. pytest-xdist's workers start this way too (conftest's
`pytest_configure`), and so do the processes a child starts with multiprocessing's "spawn" (uvicorn's workers): their
interpreter is the script `SOCKET.python`, a runner."""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import signal
import socket
import sys

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
# What the commands import when they run (the package's own modules import them lazily, for a quick `--help`).
LIBRARIES = ("torch", "transformers.modeling_utils", "transformers.trainer_seq2seq", "datasets", "accelerate",
             "safetensors.torch", "sacrebleu", "evaluate", "fastapi", "uvicorn", "httpx", "pytest")  # fmt: skip
# What loading a saved folder's remote code imports, without the package: the Auto classes, generate, the pipeline.
LIBRARIES_WITHOUT_THE_PACKAGE = ("torch", "transformers.modeling_utils", "transformers.pipelines")
# Interpreter options a runner may be given (multiprocessing repeats the parent's), which the child leaves aside: those
# taking a value, and those without (the server's own interpreter settings hold).
VALUED_OPTIONS = ("-W", "-X")
PLAIN_OPTIONS = ("-B", "-b", "-bb", "-d", "-E", "-I", "-O", "-OO", "-P", "-q", "-S", "-s", "-u", "-v")
MAX_DESCRIPTORS = 253  # (SCM_MAX_FD: what one message may carry)


def serve(path: str, watched: int, package: bool = True) -> dict:
    """Import (the package too, unless not `package`), then fork a child for each request until process `watched`
    ends; returns the request in a child."""
    import gc
    import importlib
    import pkgutil
    import select

    gc.disable()  # while importing: the collections would find next to nothing, going through every object each time
    if package:
        import hf_bahdanau

        for module in pkgutil.walk_packages(hf_bahdanau.__path__, "hf_bahdanau."):
            if not module.name.endswith(".__main__"):  # (which would run a command)
                importlib.import_module(module.name)
    for name in LIBRARIES if package else LIBRARIES_WITHOUT_THE_PACKAGE:
        importlib.import_module(name)
    gc.freeze()  # what is imported stays shared with the children: the collector does not touch it
    gc.enable()
    # A test process keeps much of what it makes (models, fixtures, modules): a full collection, which goes through all
    # of it, comes after every 100th middle-generation one instead of every 10th (CPU seconds a worker).
    gc.set_threshold(700, 10, 100)
    with open(path + ".python", "w") as runner:  # an interpreter for multiprocessing: a runner of this server
        runner.write(f'#!/bin/sh\nexec {shlex.join(run_command_line(path))} "$@"\n')
    os.chmod(path + ".python", 0o755)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # the socket appears once it accepts
    children: dict[int, socket.socket] = {}  # pid -> its request's connection
    killed: set[int] = set()  # children killed because their runner went
    ended, ending = os.pipe2(os.O_NONBLOCK)  # a child's end wakes the loop (its SIGCHLD writes a byte)
    signal.set_wakeup_fd(ending)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        waiting = [connection for pid, connection in children.items() if pid not in killed]
        ready = select.select([listener, ended, *waiting], [], [], 0.5)[0]
        for connection in ready:
            if connection == ended:
                os.read(ended, 4096)
            elif connection is listener:
                connection, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(connection, 1 << 20, MAX_DESCRIPTORS)
                sys.stdout.flush(), sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    os.close(ended), os.close(ending)
                    listener.close()
                    for other in children.values():
                        other.close()
                    connection.close()
                    request = json.loads(message)
                    take_descriptors(fds, request["fds"])
                    return request
                for fd in fds:
                    os.close(fd)
                connection.send(str(pid).encode())
                children[pid] = connection
            elif not connection.recv(16):  # the runner is gone (killed): so is its child
                pid = next(pid for pid, known in children.items() if known is connection)
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)  # (its connection is at its end until the child is reaped)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection = children.pop(pid)
            killed.discard(pid)
            try:
                connection.send(str(os.waitstatus_to_exitcode(status)).encode())
            except OSError:
                pass
            connection.close()
        try:
            os.kill(watched, 0)
        except ProcessLookupError:
            for pid in children:
                os.kill(pid, signal.SIGKILL)
            if os.path.exists(path):
                os.unlink(path)
            return {}


def take_descriptors(received: list[int], numbers: list[int]) -> None:
    """Put each received descriptor at the number it had in the runner (moved above all of them first, so that none
    is overwritten before it is placed)."""
    above = max(numbers) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD, above) for fd in received]
    for fd in received:
        os.close(fd)
    for number, fd in zip(numbers, moved, strict=True):
        os.dup2(fd, number)
        os.close(fd)


def run_command_line(path: str) -> list[str]:
    """The command that starts a process through the fork server listening on `path` (conftest's `warm_command`)."""
    return [sys.executable, "-S", os.path.abspath(__file__), "run", path]


def run_command(request: dict, path: str) -> None:
    """In the server's child: become `python ARGV...` in the runner's folder and environment, and
    end as that process ends: non-daemon threads joined, exit functions run, streams flushed. (It then leaves with
    `os._exit`: tearing down the inherited modules, as an interpreter's exit does, would copy the whole server.)"""
    import atexit
    import io
    import multiprocessing.spawn
    import runpy
    import threading
    import traceback
    import types

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    multiprocessing.spawn.set_executable(path + ".python")
    argv = list(request["argv"])
    while argv[0] not in ("-c", "-m") and argv[0].startswith("-"):
        option = argv.pop(0)
        if option in VALUED_OPTIONS:
            argv.pop(0)
        elif not option.startswith(VALUED_OPTIONS) and option not in PLAIN_OPTIONS:
            raise SystemExit(f"fork_server.py: the interpreter option {option} is not known here")
    sys.path[0] = (
        "" if argv[0] == "-c" else os.getcwd() if argv[0] == "-m" else os.path.dirname(os.path.abspath(argv[0]))
    )
    extra = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry not in sys.path]
    sys.path[1:1] = [entry for entry in extra if entry]
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(open(0, "rb", closefd=False))
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(open(1, "wb", closefd=False), line_buffering=os.isatty(1))
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        open(2, "wb", closefd=False), errors="backslashreplace", line_buffering=True
    )
    status, killed_by = 0, None
    try:
        if argv[0] == "-c":
            sys.argv = ["-c", *argv[2:]]
            main = sys.modules["__main__"] = types.ModuleType("__main__")
            exec(compile(argv[1], "<string>", "exec"), main.__dict__)
        elif argv[0] == "-m":
            sys.argv = argv[1:]  # run_module puts the module's file first, as `python -m` does
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as end:
        if end.code is None or isinstance(end.code, int):
            status = end.code or 0
        else:
            print(end.code, file=sys.stderr)
            status = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        killed_by = signal.SIGINT
    except BaseException:
        traceback.print_exc()
        status = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            pass
    if killed_by is not None:
        signal.signal(killed_by, signal.SIG_DFL)
        os.kill(os.getpid(), killed_by)
    os._exit(status & 0xFF)


def run(path: str, argv: list[str]) -> None:
    """The test's side: have the server run `argv`, pass signals on, and end as its child ends."""
    import time

    inherited = [0, 1, 2] + [fd for fd in map(int, os.listdir("/proc/self/fd")) if fd > 2 and is_open(fd)]
    if len(inherited) > MAX_DESCRIPTORS:
        raise SystemExit(f"fork_server.py: {len(inherited)} open descriptors, more than one message carries")
    deadline = time.monotonic() + 300  # the server may still be importing
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.connect(path)
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(), "fds": inherited}
    socket.send_fds(server, [json.dumps(request).encode()], inherited)
    child = int(server.recv(32))
    for number in FORWARDED:
        signal.signal(number, lambda number, _: os.kill(child, number))
    for fd in inherited:  # the child holds them now: a pipe ends when the child closes it
        os.close(fd)
    status = int(server.recv(32))
    if status < 0:  # killed by a signal: so is this process
        signal.signal(-status, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    os._exit(status)


def is_open(fd: int) -> bool:
    """Whether `fd` is an open descriptor (the one that listed them is closed again)."""
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        request = serve(sys.argv[2], int(sys.argv[3]), package="--without-the-package" not in sys.argv[4:])
        if request:
            run_command(request, sys.argv[2])
    else:
        run(sys.argv[2], sys.argv[3:])
