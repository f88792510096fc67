"""Commands `shoal serve` runs for its users: runs, resumes, forks and analyses, each the
`shoal` command line itself in a child process (so what the page starts is exactly what
the command would do, and a crash of one never takes the server down).

A job's output is kept in memory (its last lines); the id of the run it made is read from
the first line the command prints about it (`run ID → path`, `fork ID of ...`, `resume
ID from round N`)."""

from __future__ import annotations

import itertools
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shoal.core.errors import InputError

# The first line each command prints about its run.
_RUN_LINE = re.compile(r"^(?:run|fork|resume) (\S+?)(?: |$)")
_TAIL = 200  # lines of output kept per job
# Commands running at once: each is a whole Python process (a run of a million agents
# takes gigabytes), and a loop of requests must not start them without end.
MAX_RUNNING = max(2, os.cpu_count() or 1)
_KEEP_FINISHED = 100  # finished jobs the server still lists


class TooManyJobs(InputError):
    """A command refused because MAX_RUNNING are running (HTTP 429)."""

    status = 429


@dataclass
class Job:
    """One command the server started."""

    id: int
    kind: str
    argv: list[str]
    proc: subprocess.Popen[str]
    run_id: str | None = None
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=_TAIL))
    started: float = field(default_factory=time.time)
    _seen_run: threading.Event = field(default_factory=threading.Event)

    @property
    def running(self) -> bool:
        """Whether the command is still running."""
        return self.proc.poll() is None

    def as_dict(self) -> dict[str, Any]:
        """The job as the API shows it."""
        return {"id": self.id, "kind": self.kind, "run_id": self.run_id,
                "pid": self.proc.pid, "running": self.running,
                "returncode": self.proc.poll(), "log_tail": "\n".join(self.lines)}

    def error(self) -> str:
        """What the command said was wrong (its `error:` lines), or its last lines."""
        errors = [ln.split("error:", 1)[1].strip() for ln in self.lines if "error:" in ln]
        return "; ".join(errors) or "\n".join(list(self.lines)[-5:]) or \
            f"exited with code {self.proc.poll()}"


class Jobs:
    """The commands started by one server, in `folder` (their working directory)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._jobs: dict[int, Job] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def start(self, kind: str, args: list[str], stdin: str | None = None,
              wait_s: float = 120.0) -> Job:
        """Run `shoal ARGS` and wait until it names its run, or exits, or `wait_s` pass."""
        argv = [sys.executable, "-m", "shoal", *args]
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "160", "PYTHONUNBUFFERED": "1"}
        with self._lock:  # (the count and the start at once: two requests cannot both pass)
            running = [j for j in self._jobs.values() if j.running]
            if len(running) >= MAX_RUNNING:
                raise TooManyJobs(f"{len(running)} commands this server started are running "
                                  f"(at most {MAX_RUNNING} at once); start this one when one "
                                  "has finished")
            finished = sorted(j.id for j in self._jobs.values() if not j.running)
            for old in finished[:max(0, len(finished) - _KEEP_FINISHED)]:
                del self._jobs[old]
            proc = subprocess.Popen(
                argv, cwd=self.folder, env=env, text=True,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                # its own process group: the server's Ctrl-C is not its own
                start_new_session=True)
            job = Job(next(self._ids), kind, argv, proc)
            self._jobs[job.id] = job
        threading.Thread(target=self._read, args=(job,), daemon=True,
                         name=f"shoal-job-{job.id}").start()
        if stdin is not None:
            assert proc.stdin is not None
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except OSError:  # it exited before reading (its output says why)
                pass
        deadline = time.monotonic() + wait_s
        while not job._seen_run.wait(0.05) and job.running and time.monotonic() < deadline:
            pass
        if not job.running:
            job._seen_run.wait(2.0)  # (its last lines are still being read)
        return job

    def _read(self, job: Job) -> None:
        assert job.proc.stdout is not None
        for line in job.proc.stdout:
            line = line.rstrip("\n")
            job.lines.append(line)
            if job.run_id is None and (m := _RUN_LINE.match(line.strip())):
                job.run_id = m.group(1)
                job._seen_run.set()
        job.proc.wait()
        job._seen_run.set()

    def all(self) -> list[Job]:
        """Every job, newest first."""
        with self._lock:
            return sorted(self._jobs.values(), key=lambda j: -j.id)

    def for_run(self, run_id: str) -> Job | None:
        """The running job writing `run_id`, if this server started one."""
        return next((j for j in self.all() if j.run_id == run_id and j.running), None)

    def close(self) -> None:
        """Ask every running job to stop after its round (as Ctrl-C does), then wait."""
        running = [j for j in self.all() if j.running]
        for job in running:
            job.proc.send_signal(signal.SIGINT)
        for job in running:
            try:
                job.proc.wait(60)
            except subprocess.TimeoutExpired:
                job.proc.kill()
