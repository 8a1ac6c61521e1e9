"""Backend calls in a worker process (DESIGN §7): a crash is a record, not the end of the run.

A kernel under test can segfault, abort, call os._exit, hit a CUDA illegal address or hang.
In the harness's own process any of those ends the run — with no report, or (os._exit(0))
with exit status 0. So `lrkv verify`, the pytest plugin and `lrkv.testing` make every
backend call (configure, the level's entry point, supports(), a property's call) in one
worker process per run:

  * the worker starts from a clean server process (multiprocessing's forkserver where the
    platform has it, else spawn) — never a fork of a parent that may hold a CUDA context;
  * each call waits at most the policy's case_timeout; a hung worker is killed (a thread
    cannot be), and the call raises `Timeout`;
  * a worker that dies mid-call raises `WorkerDied` naming the signal or exit code; the next
    call starts a fresh worker (the backends are sent again); a CUDA error restarts it too,
    because the context it leaves is unusable;
  * the worker ignores SIGINT: Ctrl-C reaches the harness alone, which kills the worker
    and writes its incomplete report.

One worker serves the runs of a process in turn (a pytest session's many small runs do not
each pay a process start); each run sends its backends pickled — the objects themselves,
with their configuration — and the harness's environment. A backend that cannot be pickled
(it holds a lock, or is a class local to a function), or that the worker cannot unpickle (a
class defined in a script's __main__), runs in a worker forked from this process, which
inherits the object itself; `Calls.notes` says so. Where a fork is not safe (this process
holds a CUDA context) or not possible, such a backend is refused with a ValueError — it is
never run in this process unasked. The mode "inprocess" (`lrkv verify --in-process`) keeps
every call in this process — for a debugger; a crash then ends the run.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import multiprocessing as mp
import os
import io
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any

MODES = ("process", "inprocess")
PRELOAD = ["torch", "lrkv.verify.runner"]  # imported once by the server, shared by every worker it forks
FP8_DTYPE_NAMES = ("torch.float8_e4m3fn", "torch.float8_e5m2")


def _fp8_tensor(raw, dtype):
    return raw.view(dtype)


class _Pickler(pickle.Pickler):
    """pickle, with fp8 tensors sent as their bytes: torch cannot unpickle an fp8 tensor it
    pickled (its storage loader asks an UntypedStorage for a dtype), and an fp8 cache must
    reach the worker. A same-size dtype view keeps shape, strides and storage offset."""

    def reducer_override(self, obj):
        dtype = getattr(obj, "dtype", None)
        if str(dtype) in FP8_DTYPE_NAMES and type(obj).__module__.startswith("torch"):  # no torch import here
            import torch

            if isinstance(obj, torch.Tensor):
                return _fp8_tensor, (obj.detach().view(torch.uint8), dtype)
        return NotImplemented


def dumps(obj) -> bytes:
    """The isolation's pickle.dumps (fp8 tensors included); pickle.loads reads it."""
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()
START_TIMEOUT = 300.0  # s for a fresh worker to import its backends (a cold torch import can take a minute)
MAX_LOADED = 32  # runs whose backends the worker keeps loaded at once
INHERITED = -1  # the token of a forked worker's own backends
CUDA_ERROR_WORDS = ("CUDA error", "illegal memory access", "AcceleratorError", "device-side assert")


class Timeout(Exception):
    """No result within the per-call time limit."""


class _Unloaded(Exception):
    """The worker no longer holds this run's backends (evicted): load them again."""


class NotIsolated(ValueError):
    """A backend no worker can hold (not picklable, and no fork is safe here): refused."""


class WorkerDied(Exception):
    """The worker process ended during a call (a segfault, an abort, os._exit, a kill)."""


def describe_exit(code: int | None) -> str:
    if code is None:
        return "the worker process stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the worker process was killed by {name} (exit status {code})"
    return f"the worker process exited with code {code} (os._exit or a hard exit inside the backend)"


def call_in_thread(fn: Callable[[], Any], seconds: float):
    """fn() in a daemon thread: its result, its exception re-raised here, or Timeout.

    The in-process mode's time limit. A Python thread cannot be killed: a hung call is
    abandoned. BaseException is carried over too, so a backend's SystemExit is an ERROR
    record instead of the end of the run; KeyboardInterrupt arrives in the main thread."""
    box: dict[str, object] = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 — reported, never swallowed
            box["error"] = e

    worker = threading.Thread(target=target, name="lrkv-backend-call", daemon=True)
    worker.start()
    worker.join(seconds if seconds > 0 else None)
    if worker.is_alive():
        raise Timeout(f"no result within the per-case time limit of {seconds:g} s (policy case_timeout)")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]


def unusable(outs, expected: dict[str, tuple], device=None) -> str:
    """'' if outs holds a usable tensor of the contract's shape for every expected output, else
    why not (an ERROR: nothing can be measured). Checked where the call ran, so that only
    plain CPU tensors travel back from a worker."""
    import torch

    device = device or torch.device("cpu")
    if not isinstance(outs, dict):
        return f"the level's call returned a {type(outs).__name__}, not a dict of outputs"
    for name, shape in expected.items():
        t = outs.get(name)
        if not isinstance(t, torch.Tensor):
            return f"{name} is a {type(t).__name__}, not a torch.Tensor"
        if t.is_complex():
            return f"{name} has complex dtype {t.dtype}; the contract's outputs are real"
        if not t.is_floating_point():
            return f"{name} has dtype {t.dtype}; the contract's outputs are floating point"
        if t.device.type == "meta":
            return f"{name} is on the meta device (no data)"
        if t.device != device:
            return f"{name} is on {t.device}; the inputs were on {device}"
        if tuple(t.shape) != tuple(shape):
            return f"backend returned {name} {list(t.shape)}, the contract says {list(shape)}"
    return ""


# ----------------------------------------------------------------------------- the worker side
def _do(backend, op: str, args: tuple):
    """One backend call, as the harness would make it in-process — inside the backend's
    `worker_context()` when it has one: the process state it carried over in its pickle
    (the Triton backend's forced interpreter mode) applies for the call."""
    enter = getattr(backend, "worker_context", None)
    with enter() if callable(enter) else contextlib.nullcontext():
        return _op(backend, op, args)


def _op(backend, op: str, args: tuple):
    from .case import Case
    from .levels import get_level

    if op == "supports":
        return backend.supports(Case.from_dict(args[0]))
    if op == "call":  # configure, the level's entry point, and the check of what came back
        case_dict, inputs, expected = args
        case = Case.from_dict(case_dict)
        if hasattr(backend, "configure"):
            backend.configure(case)
        outs = get_level(case.level).call(backend, inputs, case)
        why = unusable(outs, expected)
        return ("bad", why) if why else ("ok", {name: outs[name] for name in expected})
    if op == "properties":  # the server properties that are facts of this process (server_properties.py)
        from .server_properties import run_properties

        case_dict, inputs, second, wanted, every_variant = args
        return run_properties(backend, Case.from_dict(case_dict), inputs, second, wanted, every_variant)
    if op == "invoke":  # a property's direct call: backend.<name>(*args, **kwargs)
        name, a, kw = args
        return getattr(backend, name)(*a, **kw)
    raise ValueError(f"unknown worker op {op!r}")


def _portable(e: BaseException) -> BaseException:
    """e itself if it survives pickling, else a RuntimeError carrying its type and message."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:  # noqa: BLE001 — any exception type may refuse pickling
        return RuntimeError(f"{type(e).__name__}: {e}")


def _load(sendable: list[tuple[str, bytes]]) -> tuple[dict, dict]:
    backends, failed = {}, {}
    for label, blob in sendable:
        try:
            backends[label] = pickle.loads(blob)
        except BaseException as e:  # noqa: BLE001 — reported to the harness, which keeps it in-process
            failed[label] = f"{type(e).__name__}: {e}"
    return backends, failed


def _serve(conn, inherited: dict | None = None) -> None:
    """The worker's loop: load a run's backends, answer its calls, unload; until told to stop.
    inherited: a forked worker's backends, the harness's own objects (token INHERITED)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the harness's to handle
    loaded: dict[int, dict] = {} if inherited is None else {INHERITED: inherited}  # run token -> label -> backend
    while True:
        try:
            token, label, op, args = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if op == "stop":
            return
        try:
            if op == "load":  # the harness's environment, import path and directory now, not the server's
                env, path, cwd, sendable = args
                os.environ.clear()
                os.environ.update(env)
                sys.path[:] = path
                os.chdir(cwd)
                loaded[token], failed = _load(sendable)
                while len(loaded) > MAX_LOADED:  # runs that never said goodbye (a property's context)
                    loaded.pop(next(iter(loaded)))
                result = ("ok", failed)
            elif op == "unload":
                loaded.pop(token, None)
                result = ("ok", None)
            elif token not in loaded:
                result = ("unloaded",)
            else:
                result = ("ok", _do(loaded[token][label], op, args))
            blob = dumps(result)
        except BaseException as e:  # noqa: BLE001 — everything the backend raises goes back as is
            tb = "".join(traceback.format_exception(e)[-3:])
            blob = dumps(("raise", _portable(e), tb))
        conn.send_bytes(blob)


def _serve_forked(conn, inherited: dict) -> None:
    """_serve in a fork of the harness: one intra-op thread, since the parent's OpenMP pool does
    not survive a fork (the child's first parallel torch op waits for it forever)."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)
    _serve(conn, inherited)


# ----------------------------------------------------------------------------- the harness side
_START_LOCK = threading.Lock()


@contextlib.contextmanager
def _without_main():
    """Start a worker without the harness's __main__.

    spawn and forkserver children re-import the parent's main module (as __mp_main__); a
    user's script that calls lrkv.testing without an `if __name__ == "__main__":` guard would
    then run again inside every worker. The worker's code lives in this module and needs no
    main module, so its preparation data leaves it out (a backend class defined in __main__
    then fails to load there and runs in a forked worker, with a note)."""
    from multiprocessing import spawn

    original = spawn.get_preparation_data

    def prepare(name):
        data = original(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    with _START_LOCK:
        spawn.get_preparation_data = prepare
        try:
            yield
        finally:
            spawn.get_preparation_data = original


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored while a process is exec'd, so that it starts ignoring it (an ignored signal
    survives exec): Ctrl-C while the server imports torch would print its traceback."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _context():
    methods = mp.get_all_start_methods()
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        return ctx
    return mp.get_context("spawn")


def fork_refusal() -> str:
    """'' where a forked worker may inherit a backend, else why not: fork is unsafe once this
    process holds a CUDA context (the child's is unusable), and absent on some platforms."""
    if "fork" not in mp.get_all_start_methods():
        return "this platform cannot fork a worker"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "this process holds a CUDA context, which a forked worker cannot use"
    return ""


class Worker:
    """One worker process, started on first use and shared by the runs of this process (each
    run loads its own backends into it); killed on a timeout, replaced after a crash.
    inherit: backends that cannot be pickled — the worker is then a fork of this process that
    holds them as they are now (one such worker per run, started again after a crash)."""

    def __init__(self, inherit: dict | None = None):
        self._proc = None
        self._conn = None
        self._inherit = inherit
        self.generation = 0  # bumped at every start: a run's backends are loaded again after a restart

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def _start(self) -> None:
        if self._inherit is not None:  # a fork: the child has this process's objects, nothing is sent
            ctx = mp.get_context("fork")
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=_serve_forked, args=(theirs, self._inherit), name="lrkv-backend-worker", daemon=True)
            with _sigint_ignored():
                proc.start()
            theirs.close()
            self._proc, self._conn = proc, ours
            self.generation += 1
            return
        ctx = _context()
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=_serve, args=(theirs,), name="lrkv-backend-worker", daemon=True)
        forkserver = ctx.get_start_method() == "forkserver"
        if forkserver:
            from multiprocessing import forkserver as fs

            with _without_main(), _sigint_ignored():
                fs.ensure_running()  # execs the server; it returns before the server's imports finish
        with _without_main(), (contextlib.nullcontext() if forkserver else _sigint_ignored()):
            proc.start()
        theirs.close()
        self._proc, self._conn = proc, ours
        self.generation += 1

    def _reap(self) -> int | None:
        proc = self._proc
        self._proc = self._conn = None
        if proc is None:
            return None
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(10)
        return proc.exitcode

    def kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
        self._reap()

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send_bytes(dumps((0, None, "stop", ())))
            except OSError:
                pass
        self.kill()

    def request(self, token: int, label: str | None, op: str, args: tuple, timeout: float):
        """Send one request and wait for its answer (see the module docstring for the failures)."""
        if self._proc is None:
            self._start()
        try:
            self._conn.send_bytes(dumps((token, label, op, args)))
            ready = self._conn.poll(timeout if timeout > 0 else None)
        except (OSError, EOFError):
            ready = True  # the worker is gone: recv below says how
        except KeyboardInterrupt:
            self.kill()
            raise
        if not ready:
            self.kill()
            raise Timeout(f"no result within the per-case time limit of {timeout:g} s (policy case_timeout); "
                          "the worker process was killed")
        try:
            reply = pickle.loads(self._conn.recv_bytes())
        except (EOFError, OSError):
            raise WorkerDied(describe_exit(self._reap())) from None
        except KeyboardInterrupt:
            self.kill()
            raise
        if reply[0] == "ok":
            return reply[1]
        if reply[0] == "unloaded":
            raise _Unloaded()
        _, exc, tb = reply
        if any(w in f"{type(exc).__name__}: {exc}" for w in CUDA_ERROR_WORDS):
            self.kill()  # a CUDA error leaves the context unusable: the next call gets a fresh worker
        exc.__lrkv_traceback__ = tb
        raise exc


_WORKER = Worker()
atexit.register(_WORKER.close)
_TOKENS = itertools.count(1)


class Calls:
    """The backend calls of one run, in the worker process or in this one (see the module docstring)."""

    def __init__(self, backends: list[tuple[str, object]], mode: str = "process"):
        if mode not in MODES:
            raise ValueError(f"isolation must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.notes: list[str] = []
        self._token = next(_TOKENS)
        self._inproc: set[str] = set()
        self._sendable: list[tuple[str, bytes]] = []
        self._loaded_in = 0  # the worker generation this run's backends were loaded into
        self._objects = dict(backends)
        self._forked: Worker | None = None  # the fork that holds the backends that cannot be sent
        if mode == "inprocess":
            self._inproc = {label for label, _ in backends}
            return
        for label, b in backends:
            if getattr(b, "isolation", "process") == "inprocess":  # e.g. the tp level: it runs its own ranks
                self._inproc.add(label)
                continue
            try:
                self._sendable.append((label, dumps(b)))
            except Exception as e:  # noqa: BLE001 — any pickling failure: a forked worker inherits it
                self._fork(label, f"it cannot be pickled: {type(e).__name__}: {e}")

    def _fork(self, label: str, why: str) -> None:
        """Isolate a backend the worker cannot receive in a fork of this process; where no fork
        is safe, refuse it (never run it here unasked: an os._exit in it would end the run with
        exit 0 and no report)."""
        refused = fork_refusal()
        if refused:
            raise NotIsolated(f"backend {label!r} cannot be isolated: {why[:200]}, and {refused}; make it picklable, "
                             "or run it in this process on purpose with --in-process (LRKV_ISOLATION=inprocess)")
        held = dict(self._forked._inherit) if self._forked else {}
        if self._forked is not None:
            self._forked.close()
        self._forked = Worker({**held, label: self._objects[label]})
        self.notes.append(f"{label}: runs in a forked worker process ({why[:200]})")

    def _keep(self, label: str, why: str) -> None:
        self._inproc.add(label)
        self.notes.append(f"{label}: runs in-process ({why}); a crash in it ends the run")

    def _ensure_loaded(self, timeout: float) -> None:
        if self._loaded_in == _WORKER.generation and _WORKER.alive:
            return
        sendable = [(lab, blob) for lab, blob in self._sendable if lab not in self._inproc]
        failed = _WORKER.request(self._token, None, "load", (dict(os.environ), list(sys.path), os.getcwd(), sendable),
                                 max(timeout, START_TIMEOUT))
        self._loaded_in = _WORKER.generation
        for label, why in failed.items():
            self._sendable = [(lab, blob) for lab, blob in self._sendable if lab != label]
            self._fork(label, f"the worker process could not load it: {why}")

    def call(self, label: str, backend, op: str, args: tuple, timeout: float):
        """The backend's op (see _do) with the time limit: its result, or its exception, Timeout or WorkerDied."""
        if label not in self._inproc and self._sendable and not self._is_forked(label):
            try:
                self._ensure_loaded(timeout)
            except (WorkerDied, Timeout) as e:
                for lab, _ in self._sendable:
                    if lab not in self._inproc:
                        self._keep(lab, f"the worker process could not start: {e}")
        if self._is_forked(label):
            return self._forked.request(INHERITED, label, op, args, timeout)
        if label in self._inproc or not self._sendable:
            return call_in_thread(lambda: _do(backend, op, args), timeout)
        try:
            return _WORKER.request(self._token, label, op, args, timeout)
        except _Unloaded:
            self._loaded_in = 0
            self._ensure_loaded(timeout)
            return _WORKER.request(self._token, label, op, args, timeout)

    def _is_forked(self, label: str) -> bool:
        return self._forked is not None and label in self._forked._inherit

    def close(self) -> None:
        if self._forked is not None:
            self._forked.close()
        if self._loaded_in and self._loaded_in == _WORKER.generation and _WORKER.alive:
            try:
                _WORKER.request(self._token, None, "unload", (), 30.0)
            except (WorkerDied, Timeout, OSError):
                pass

    def __enter__(self) -> Calls:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def default_mode() -> str:
    """LRKV_ISOLATION=inprocess in the environment turns isolation off (as --in-process does)."""
    mode = os.environ.get("LRKV_ISOLATION", "process")
    if mode not in MODES:
        print(f"lrkv: LRKV_ISOLATION={mode!r} is not one of {MODES}; using 'process'", file=sys.stderr)
        return "process"
    return mode
