"""Runs the real gemm_server (CPU backend) on a free loopback port for a test,
as the shell tests in tests/ do: port 0, the bound port read from
--port_file."""

import os
import signal
import subprocess
import sys
import tempfile
import time


def server_binary():
    """The gemm_server path the BUILD rule passes as the first argument (taken
    out of sys.argv so that unittest does not see it)."""
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        raise SystemExit("usage: <test> <path of gemm_server> [unittest arguments]")
    return os.path.abspath(sys.argv.pop(1))


class ServerProcess:
    """`with ServerProcess(binary, "--max_message_bytes=...") as s:` gives
    s.target ("127.0.0.1:<port>"); stops the server (SIGTERM, then SIGKILL)."""

    def __init__(self, binary, *flags):
        self._binary = binary
        self._flags = list(flags)
        self._dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self._proc = None
        self.target = None

    def __enter__(self):
        port_file = os.path.join(self._dir, "port")
        self.log_path = os.path.join(self._dir, "server.log")
        args = [self._binary, "--listen=127.0.0.1:0", f"--port_file={port_file}",
                "--metrics_listen=", "--backend=cpu", "--cpu_concurrency=2", "--blas_threads=1",
                "--drain_timeout=5s"] + self._flags
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"gemm_server exited {self._proc.returncode}:\n{self.log()}")
            try:
                with open(port_file) as f:
                    text = f.read()
            except FileNotFoundError:
                text = ""
            if text.endswith("\n"):
                self.target = f"127.0.0.1:{text.strip()}"
                return self
            time.sleep(0.05)
        self.__exit__()
        raise RuntimeError("gemm_server wrote no port file within 60 s:\n" + self.log())

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-4000:]

    def __exit__(self, *exc):
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
