"""`mtcli` processes forked from a warm parent, for tests that start many of them.

Each is still a process of its own: its stdin, stdout, stderr, working folder, signals and
exit code are its own, and what it prints, raises or leaves behind is what `python -m mtcli`
would. It is forked from a parent that has already imported what a fresh `mtcli` imports on
its way (the CLI; for training, torch and the TorchDynamo module torch's optimizers import at
their first step), instead of starting Python and importing again: 0.11 s of a 0.12 s refusal,
2.3 CPU-seconds of a training run's start. The parent has run nothing, so no torch thread pool
exists to be forked. Whether a fresh interpreter imports torch before it should, and the
start-up itself, are what the other subprocess tests check (tests/test_early_checks.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from tests.conftest import REPO

CLI = ("mtcli.cli",)
TRAINING = ("torch", "torch._dynamo", "mtcli.cli", "mtcli.cli.train", "mtcli.training.loop")
SERVING = ("torch", "mtcli.cli", "mtcli.cli.serve", "mtcli.serving.app", "uvicorn")

PARENT = r"""
import importlib, io, json, os, select, sys, traceback
for name in sys.argv[3].split(","):
    importlib.import_module(name)
from mtcli.cli import main

def reopened(fd, like, mode):
    raw = io.open(fd, mode + "b", buffering=0, closefd=False)
    buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
    return io.TextIOWrapper(buffered, encoding=like.encoding, errors=like.errors,
                            line_buffering=like.line_buffering)

def run(job):
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    for fd, path in ((0, job["stdin"]), (1, job["stdout"]), (2, job["stderr"])):
        os.dup2(os.open(path, os.O_RDONLY if fd == 0 else os.O_WRONLY), fd)
    sys.stdin, sys.stdout, sys.stderr = (reopened(0, sys.stdin, "r"),
        reopened(1, sys.stdout, "w"), reopened(2, sys.stderr, "w"))
    sys.argv = ["mtcli", *job["args"]]
    code = 0
    try:
        main(job["args"], prog_name="python -m mtcli")
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)

requests, answers = int(sys.argv[1]), io.open(int(sys.argv[2]), "w", encoding="utf-8")
pending, running, ended, closed = b"", {}, {}, False

def exit_code(pid):
    # an ended child stays a zombie (WNOWAIT) until the test waits for it, as with Popen: a
    # signal sent late then reaches nothing, never a process that took its pid
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

while not (closed and not running and not ended):
    wait = 0.02 if running else None
    if closed:
        select.select([], [], [], wait)
    elif select.select([requests], [], [], wait)[0]:
        chunk = os.read(requests, 65536)
        closed = not chunk
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            job = json.loads(line)
            if "release" in job:  # the test has its exit code: reap it
                if (pid := ended.pop(job["release"], None)) is not None:
                    os.waitpid(pid, 0)
                continue
            sys.stdout.flush(); sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                os.close(requests)
                run(job)
            running[pid] = job["id"]
            answers.write(json.dumps({"id": job["id"], "pid": pid}) + "\n"); answers.flush()
    for pid in list(running):
        code = exit_code(pid)
        if code is not None:
            job_id = running.pop(pid)
            ended[job_id] = pid
            answers.write(json.dumps({"id": job_id, "code": code}) + "\n"); answers.flush()
    if closed:
        for pid in ended.values():
            os.waitpid(pid, 0)
        ended.clear()
"""


class ForkServer:
    """One warm parent that forks a process per `spawn`, several at once."""

    def __init__(self, preload: tuple[str, ...] = CLI, env: dict | None = None):
        req_read, req_write = os.pipe()
        ans_read, ans_write = os.pipe()
        self.env = {**os.environ, "NO_COLOR": "1", **(env or {})}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PARENT, str(req_read), str(ans_write), ",".join(preload)],
            cwd=REPO, env=self.env, pass_fds=(req_read, ans_write), stdin=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(req_read)
        os.close(ans_write)
        self._requests = os.fdopen(req_write, "w", encoding="utf-8")
        self._lock, self._next = threading.Lock(), 0
        self._events: dict[int, dict] = {}
        self._changed = threading.Condition()
        threading.Thread(target=self._read_answers, args=(ans_read,), daemon=True).start()

    def _read_answers(self, fd: int) -> None:
        with os.fdopen(fd, "r", encoding="utf-8") as answers:
            for line in answers:
                answer = json.loads(line)
                with self._changed:
                    self._events.setdefault(answer.pop("id"), {}).update(answer)
                    self._changed.notify_all()

    def _await(self, job_id: int, key: str, timeout: float | None) -> int | None:
        with self._changed:
            if not self._changed.wait_for(lambda: key in self._events.get(job_id, {}), timeout):
                return None
            return self._events[job_id][key]

    def spawn(self, args: list[str], *, stderr="pipe", stdin: bytes = b"", cwd: Path = REPO,
              env: dict | None = None) -> ForkedProcess:  # fmt: skip
        """A process running `mtcli ARGS`; stderr "pipe" (read as it comes), a Path, or None."""
        return ForkedProcess(self, args, stderr, stdin, cwd, {**self.env, **(env or {})})

    def run(self, args: list[str], stdin: bytes = b"", cwd: Path = REPO, timeout: float = 120):
        """`mtcli ARGS` to its end: (exit code, stdout bytes, stderr bytes)."""
        proc = self.spawn(args, stderr=None, stdin=stdin, cwd=cwd)
        code = proc.wait(timeout)
        return code, proc.stdout_bytes(), proc.stderr_bytes()

    def _send(self, job: dict) -> int:
        with self._lock:
            self._next += 1
            job["id"] = self._next
            self._requests.write(json.dumps(job) + "\n")
            self._requests.flush()
            return self._next

    def _release(self, job_id: int) -> None:
        with self._lock:
            self._requests.write(json.dumps({"release": job_id}) + "\n")
            self._requests.flush()

    def close(self) -> None:
        self._requests.close()
        self.proc.wait(timeout=60)


class ForkedProcess:
    """What a test uses of subprocess.Popen, for a process forked by a ForkServer."""

    def __init__(self, server: ForkServer, args, stderr, stdin: bytes, cwd: Path, env: dict):
        self.server, self.returncode = server, None
        self._tmp = tempfile.TemporaryDirectory()
        tmp = Path(self._tmp.name)
        files = {"stdin": tmp / "stdin", "stdout": tmp / "stdout", "stderr": tmp / "stderr"}
        files["stdin"].write_bytes(stdin)
        files["stdout"].touch()
        if stderr == "pipe":
            os.mkfifo(files["stderr"])
        elif stderr is None:
            files["stderr"].touch()
        else:
            files["stderr"] = Path(stderr)
            files["stderr"].touch()
        self._files = files
        job = {"args": list(args), "cwd": str(cwd), "env": env, **{k: str(v) for k, v in files.items()}}  # fmt: skip
        self._id = server._send(job)
        self.pid = server._await(self._id, "pid", 60)
        self.stderr = open(files["stderr"], encoding="utf-8") if stderr == "pipe" else None  # noqa: SIM115

    def poll(self) -> int | None:
        if self.server._await(self._id, "code", 0) is None:
            return None
        return self.wait()

    def wait(self, timeout: float | None = None) -> int:
        code = self.server._await(self._id, "code", timeout)
        if code is None:
            raise subprocess.TimeoutExpired(["mtcli"], timeout)
        if self.returncode is None:  # the zombie may go now
            self.server._release(self._id)
        self.returncode = code
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:  # ended but not waited for: a zombie, which ignores it
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        rest = self.stderr.read() if self.stderr else ""
        self.wait(timeout)
        return self.stdout_bytes().decode(), rest

    def stdout_bytes(self) -> bytes:
        return self._files["stdout"].read_bytes()

    def stderr_bytes(self) -> bytes:
        return b"" if self.stderr else self._files["stderr"].read_bytes()
