"""Running suite cases in worker processes: each worker takes case ids on stdin and answers one JSON line per
case; a worker that dies (a runtime abort, a segfault) costs the case in hand, which is recorded as a crash
with its signal, and a fresh worker takes the next case; a case past its time limit is killed the same way.

    python -m litert_torch.suites.runner worker opinfo     # what the parent starts, once per job
"""

from __future__ import annotations

import importlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from typing import Callable, Iterable

MARK = "@@case "
SUITES = {"opinfo": "litert_torch.suites.opinfo", "onnx-node": "litert_torch.suites.onnx_node",
          "fuzz": "litert_torch.suites.fuzz"}


def suite_module(name: str) -> types.ModuleType:
    return importlib.import_module(SUITES.get(name, name))


def _worker(suite: str) -> None:
    _no_core_dumps()
    serve(suite_module(suite).run_case)


def serve(run_case: Callable[[str], dict]) -> None:
    """The worker side of the protocol: case ids on stdin, one answer line each on stdout (this module needs
    only the standard library, so another converter's worker can load it by file and serve its own cases)."""
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints of the code under test stay off the answer channel
    out.write(MARK + json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        case = line.strip()
        if not case:
            continue
        try:
            result = run_case(case)
        except Exception as exc:  # noqa: BLE001 - a failure of the harness itself, reported as such
            result = {"status": "error", "detail": f"harness: {type(exc).__name__}: {exc}"[:300]}
        out.write(MARK + json.dumps({"case": case, **result}) + "\n")
        out.flush()


def _no_core_dumps() -> None:
    """A crashing case dies at once instead of writing a core dump first."""
    import resource

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class _Worker:
    def __init__(self, suite: str, command: list[str] | None = None):
        # The worker imports what this process can (the suite module may live next to the caller, as tests do).
        # `command`: another worker program speaking the same protocol (another converter, in its own venv).
        if command is None:
            path = os.pathsep.join(p if p else os.getcwd() for p in sys.path)
            env = dict(os.environ, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=path)
            command = [sys.executable, "-m", "litert_torch.suites.runner", "worker", suite]
        else:
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
            env.update(PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="3")
        self.log = tempfile.TemporaryFile()  # the worker's stderr: what it said when it failed to start
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, env=env)
        if self.proc.stdin is None or self.proc.stdout is None:  # both asked for as pipes above
            raise OSError("the worker process was started without its pipes")
        self.stdin, self.stdout = self.proc.stdin, self.proc.stdout
        self.buffer = ""
        self.eof = False
        self.ready = self._read(600.0) is not None

    def startup_error(self) -> str:
        self.log.seek(0)
        lines = self.log.read().decode("utf-8", "replace").strip().splitlines()
        return "the worker did not start: " + (lines[-1][:300] if lines else "no output")

    def _read(self, timeout: float) -> dict | None:
        """The next answer line, or None on EOF (`self.eof` set) or timeout."""
        deadline = time.monotonic() + timeout
        fd = self.stdout.fileno()
        while True:
            while "\n" in self.buffer:
                line, self.buffer = self.buffer.split("\n", 1)
                if line.startswith(MARK):
                    return json.loads(line[len(MARK):])
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                self.eof = True
                return None
            self.buffer += chunk.decode("utf-8", "replace")

    def run(self, case: str, timeout: float) -> dict:
        try:
            self.stdin.write(case + "\n")
            self.stdin.flush()
        except (BrokenPipeError, OSError):
            return self._died()
        answer = self._read(timeout)
        if answer is not None:
            return {k: v for k, v in answer.items() if k != "case"}
        if self.eof:
            return self._died()
        self.kill()
        return {"status": "timeout", "detail": f"no answer in {timeout:.0f} s"}

    def _died(self) -> dict:
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:  # the answer channel closed, the process lingers
            self.kill()
            code = self.proc.returncode
        name = signal.Signals(-code).name if code < 0 and -code in signal.Signals._value2member_map_ else str(code)
        return {"status": "crash", "detail": f"the process died ({name})"}

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.log.close()

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


def run_cases(suite: str, cases: Iterable[str], jobs: int = 2, timeout: float = 120.0,
              progress: Callable[[int, int, str, dict], None] | None = None,
              command: list[str] | None = None) -> dict[str, dict]:
    """Run `cases` of `suite` in `jobs` worker processes (ours, or `command`'s); {case: {"status", "detail",
    ...}}."""
    cases = list(cases)
    todo: queue.Queue = queue.Queue()
    for case in cases:
        todo.put(case)
    results: dict[str, dict] = {}
    lock = threading.Lock()

    def work() -> None:
        worker: _Worker | None = None
        while True:
            try:
                case = todo.get_nowait()
            except queue.Empty:
                break
            if worker is None or not worker.alive:
                worker = _Worker(suite, command)
            result = worker.run(case, timeout) if worker.ready else {"status": "error",
                                                                     "detail": worker.startup_error()}
            with lock:
                results[case] = result
                if progress is not None:
                    progress(len(results), len(cases), case, result)
        if worker is not None:
            worker.stdin.close()
            worker.kill()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {case: results[case] for case in cases if case in results}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "worker":
        _worker(sys.argv[2])
    else:
        sys.exit("usage: python -m litert_torch.suites.runner worker SUITE")
