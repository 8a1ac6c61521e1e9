"""Record every input the harness hands a backend: a proxy around the built-in eager backend
that hashes each contract call's arguments (by parameter name) and appends one line per call to
$REC_OUT. Run at two checkouts and compare the files to show that a change kept the inputs
bit-identical (how the one-cache, one-case refactor was checked):

    cd CHECKOUT && REC_OUT=/tmp/inputs-A.txt PYTHONPATH=/path/to/ci python3 -m lrkv verify \\
        --backend record_inputs:backend --grid default --out /tmp/rec-A --no-progress
"""
import dataclasses, hashlib, inspect, os
import torch
from lrkv.verify.backend_registry import get_backend

def _h(x, acc, key):
    if x is None:
        return
    if isinstance(x, torch.Tensor):
        t = x.detach().contiguous().cpu()
        if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            t = t.view(torch.uint8)
        acc.append(f"{key}:{tuple(x.shape)}:{x.dtype}:" + hashlib.sha1(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"").hexdigest()[:16])
    elif dataclasses.is_dataclass(x) and not isinstance(x, type):
        for f in dataclasses.fields(x):
            _h(getattr(x, f.name), acc, f"{key}.{f.name}")
    elif isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        for i, v in enumerate(x):
            _h(v, acc, f"{key}[{i}]")
    elif hasattr(x, "_fields"):
        for n in x._fields:
            _h(getattr(x, n), acc, f"{key}.{n}")
    elif isinstance(x, (int, float, str, bool)):
        acc.append(f"{key}={x!r}")
    else:
        acc.append(f"{key}~{type(x).__name__}:{x!r}"[:200])

class Recorder:
    name = "rec-eager"
    role = "verified"
    def __init__(self):
        object.__setattr__(self, "_inner", get_backend("eager"))
    def __getattr__(self, name):
        if name.startswith("__") or name == "_inner":
            raise AttributeError(name)
        v = getattr(self._inner, name)
        if name in ("decode_attention", "paged_decode_attention", "extend_attention", "layer_step") and callable(v):
            sig = inspect.signature(v)
            def wrapped(*a, **k):
                b = sig.bind(*a, **k)
                acc = [name]
                for n, x in b.arguments.items():
                    if n in ("kw", "kwargs", "launch"):
                        for kk, xx in x.items():
                            _h(xx, acc, kk)
                    else:
                        _h(x, acc, n)
                with open(os.environ["REC_OUT"], "a") as f:
                    f.write(" ".join(acc) + "\n")
                return v(*a, **k)
            return wrapped
        return v

def backend():
    return Recorder()
