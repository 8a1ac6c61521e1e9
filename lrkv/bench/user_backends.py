"""A user's decode backend as bench rows: `lrkv bench --backend package.module:attribute`.

The object is resolved exactly as `lrkv verify --backend` resolves it
(`lrkv.verify.backend_registry.get_backend`: an object, a class or a zero-argument factory,
checked against the backend protocol of DESIGN §4) and times the factored LRKV row through
each of its kernel entries — the contracts of DESIGN §4 — on the same inputs, in the same
interleaved rounds and the same table as the built-in rows (ours, and SDPA on a GPU):

  <name>          `decode_attention` on the contiguous cache
  <name>-paged    `paged_decode_attention` on a paged copy of that cache (pages of PAGE_SIZE
                  slots in a random order), handed over in the layout the backend declares
                  (`cache_layout`: lrkv.reference.cache_layouts — vLLM's block pools, ...)
  <name>-extend   `extend_attention` over the same paged cache, one new query per sequence
                  (cu_seqlens_q = 0, 1, ..., B: each query is its sequence's last token)

The conversion into the layout is done once, untimed; the row's note names the layout. A
backend without an entry (the method, or its level) gets a skipped row saying "not timed:
no paged entry" (or extend), never a crash.

Nothing is dropped silently: a backend that is not available, does not declare the kernel
level or the run's dtype becomes a skipped row with the reason; one whose `available()` or
`decode_attention` raises, or whose output is obviously wrong on a small batch
(`lrkv.bench.sanity`), an error row — never a timing.
"""

from __future__ import annotations

import torch

from ..reference.cache import FactoredCache
from ..reference.cache_layouts import ADAPTERS, DEFAULT as DEFAULT_LAYOUT
from ..reference.fp8 import PARTS
from ..spec import decode_bytes, dtype_name
from ..verify.backend_registry import get_backend
from ..verify.protocol import cache_layout, check_available
from .families import BenchFamily, step_args
from .prepared import Prepared, finish
from .sanity import WrongOutput, check_output


class OutputCheckFailed(RuntimeError):
    """The backend's output failed the sanity check (or it raised there): its row is not timed."""


PAGE_SIZE = 16  # as the built-in triton-paged row
# entry -> (the level it needs, its method, the row's name suffix)
ENTRIES = {"decode": ("kernel", "decode_attention", ""),
           "paged": ("kernel-paged", "paged_decode_attention", "-paged"),
           "extend": ("kernel-extend", "extend_attention", "-extend")}


def user_steps(label: str, dtype: torch.dtype) -> list:
    """Every row a user's backend makes: one per kernel entry (ENTRIES), its own backend object shared."""
    first = UserSteps(label, dtype)
    return [first, *(UserSteps(label, dtype, entry, backend=first.backend) for entry in ENTRIES if entry != "decode")]


def layout_call(fn, layout: str, q, paged: FactoredCache, basis_k, basis_v, *, scale,
                cu_seqlens_q: torch.Tensor | None = None):
    """fn (a paged decode, or with `cu_seqlens_q` an extend entry) bound to the paged cache in
    `layout` (converted here, once): a zero-argument call."""
    extend = cu_seqlens_q is not None
    if layout == DEFAULT_LAYOUT:  # the contract's own paged form
        laid = {**{p: getattr(paged, p) for p in PARTS}, "lengths": paged.lengths, "page_table": paged.page_table}
        names = ("q", *(("cu_seqlens_q",) if extend else ()), *PARTS, "basis_k", "basis_v", "lengths",
                 *(() if extend else ("page_table",)))
        keywords = ("page_table",) if extend else ()
        laid["key_scale"] = paged.key_scale
    else:
        adapter = ADAPTERS[layout]
        laid = adapter.arrange(paged, cu_seqlens_q)
        names, keywords = (adapter.EXTEND, adapter.EXTEND_KEYWORDS) if extend else (adapter.DECODE, ())
    laid |= {"q": q, "basis_k": basis_k, "basis_v": basis_v, "cu_seqlens_q": cu_seqlens_q}
    args = tuple(laid[n] for n in names)
    kwargs = {"scale": scale, "key_scale": laid["key_scale"], **{n: laid[n] for n in keywords}}
    return lambda: fn(*args, **kwargs)


class UserSteps:
    """The lrkv row of one protocol backend's kernel `entry` (ENTRIES); `label` is the --backend
    value that named it."""

    def __init__(self, label: str, dtype: torch.dtype, entry: str = "decode", backend=None):
        self.label = label
        if backend is None:
            try:
                backend = get_backend(label)
            except (ValueError, TypeError) as e:  # the CLI prints it and exits 2: say which value
                raise type(e)(str(e) if label in str(e) else f"{label}: {e}") from None
        self.backend = backend
        self.entry = entry
        self.level, self.method, suffix = ENTRIES[entry]
        self.name = self.backend.name + suffix
        self.layout = cache_layout(self.backend) if entry != "decode" else None
        self.dtype = dtype
        self._broken = ""  # available() raised: every row of this backend is an error row, with why
        self._checked: dict[tuple, str] = {}  # (spec, device) -> "" or why the output is wrong

    def available(self, device: str) -> tuple[bool, str]:
        if self.entry != "decode" and (self.level not in self.backend.levels
                                       or not callable(getattr(self.backend, self.method, None))):
            return False, (f"not timed: no {self.entry} entry ({self.label} declares no {self.level} level with "
                           f"`{self.method}`; levels: {sorted(self.backend.levels)})")
        if self.level not in self.backend.levels:
            return False, f"{self.label} does not declare the kernel level (levels: {sorted(self.backend.levels)})"
        if self.dtype not in self.backend.dtypes:
            return False, (f"{self.label} does not take {dtype_name(self.dtype)} (dtypes: "
                           f"{', '.join(dtype_name(d) for d in self.backend.dtypes)}); pick one with --dtype")
        try:
            ok, why = check_available(self.backend, self.label)
        except ValueError as e:  # it raised, or returned something else than (bool, str)
            self._broken = str(e)
            return True, ""  # planned, so that prepare() turns it into an error row per shape
        return ok, "" if ok else f"{self.label} not available: {why}"

    def supports(self, family: BenchFamily) -> tuple[bool, str]:
        if family.name != "lrkv":
            return False, "a user backend implements the factored LRKV decode contract only"
        return True, ""

    def extra_bytes(self, spec, batch: int, seq_len: int, dtype) -> int:
        """Memory beyond the shared inputs: the paged copy (paginate's pool and staging) and, in a
        server layout, the adapter's copy of it."""
        if self.entry == "decode":
            return 0
        copies = 2 if self.layout == DEFAULT_LAYOUT else 3
        return copies * decode_bytes(spec, -(-seq_len // PAGE_SIZE) * PAGE_SIZE + PAGE_SIZE, dtype, batch=batch)

    def _bind(self, q, sk, sv, lk, lv, bk, bv, lengths, *, scale):
        """The entry bound to these decode inputs (the paged copy and its layout made here, untimed)."""
        if self.entry == "decode":
            return lambda: self.backend.decode_attention(q, sk, sv, lk, lv, bk, bv, lengths, scale=scale)
        paged = FactoredCache(sk, sv, lk, lv, lengths).paginate(
            PAGE_SIZE, generator=torch.Generator().manual_seed(0), extra_pages=0)
        cu = (torch.arange(q.shape[0] + 1, dtype=torch.int32, device=q.device) if self.entry == "extend" else None)
        return layout_call(getattr(self.backend, self.method), self.layout, q, paged, bk, bv, scale=scale,
                           cu_seqlens_q=cu)

    def _call(self, *args, scale):
        return self._bind(*args, scale=scale)()

    def prepare(self, family: BenchFamily, spec, inputs: dict, device: str) -> Prepared:
        if self._broken:
            raise RuntimeError(self._broken)
        key = (spec.short(), device)
        if key not in self._checked:  # once per spec and device: a small batch against float64
            try:
                check_output(self._call, spec, device, self.dtype)
                self._checked[key] = ""
            except WrongOutput as e:  # wrong output: the check's own message
                self._checked[key] = str(e)
            except Exception as e:  # noqa: BLE001 — a raise in the backend is the same verdict: not timed
                self._checked[key] = f"{self.method} raised {type(e).__name__}: {e}"
        if self._checked[key]:
            raise OutputCheckFailed(self._checked[key])
        prepared = finish(self._bind(*step_args(family, inputs), scale=spec.scale), device)
        if self.layout is not None:
            prepared.note = "; ".join(filter(None, (prepared.note, f"{self.method}, cache layout {self.layout}, "
                                                                   f"pages of {PAGE_SIZE}")))
        return prepared
