"""Memory traffic of the Triton decode kernels, counted in the interpreter, beside its prediction.

    with count_traffic() as counter:        # under TRITON_INTERPRET (lrkv.kernels.runtime.interpreter())
        attend(q, cache, basis_k, basis_v, scale=...)
    counter.summary(known)                  # bytes loaded / stored per buffer, unique bytes loaded

Triton's interpreter runs every `tl.load` / `tl.store` as a masked load or store of the
builder (`triton.runtime.interpreter.InterpreterBuilder.create_masked_load/_store`; the
unmasked ones go through them too). `count_traffic` listens to both through the one
interception the memcheck uses (`lrkv.kernels.memcheck.listen`) and adds, per launch, the
element bytes of the lanes whose mask is true (a masked-off lane moves nothing) to the buffer
its address falls in, and keeps the addresses, so the bytes of distinct elements read are
counted too. Buffers are the tensor arguments of each launch (their storages; never the
kernels' parameter names): the
caller names the ones it passed (q, the cache parts, the bases, ...); the rest are the
wrappers' own allocations, sorted by use — written by one launch and read by a later one is
**scratch** (the split-K partials), written only is **output** (out, lse), read only is a
**table** (RoPE cos/sin, the scale scalar). So the count survives a rewrite of the kernels
that keeps their public entry points.

`predict` is the byte count written down from the kernel's design (docs/kernels.md, "Memory
traffic"), for a launch shape (`lrkv.kernels.launch.LaunchConfig`): per row of the grid and
valid slot the shared K/V once per head group, the latents once, the bases and q once per
(row, split) program, the partials written by the split kernel and read by the combine, and
B_h^V once per (row, head) there; exact RoPE re-reads B_h^K per tile and the cos/sin rows per
group. `payload` is what the contract itself must move: the cache bytes of the valid tokens
(fp8: with their scales), the bases, q, out and lse.

`gpu_launch` (`lrkv.kernels.launch`, where the `triton-sm90` backend takes it too) is the
launch a 132-SM sm_90 GPU picks (`pick_launch`'s GPU row: group, splits, tile, private
path); `measure` runs the kernel through its public wrapper (`lrkv.kernels.decode.attend`)
with that launch forced, in the interpreter, and counts.
`lrkv bench --traffic` prints the table (`traffic_table`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from ..kernels.launch import gpu_launch, launch_overrides

PAGE_SIZE = 16  # the paged rows' page (the bench's triton-paged row, and the GPU target's)
N_NEW = 4  # extend rows: new tokens per sequence (the default; `measure(n_new=)`)
VARIANTS = ("decode", "paged", "extend")
PATHS = ("wide", "per_head", "rope")  # rope: exact RoPE on the path the GPU row picks for it
CACHES = ("bf16", "fp8")
FP8_FORMAT, FP8_GRANULARITY = "float8_e4m3fn", "per_head"  # as the bench's triton-fp8 row
ACC_BYTES = 4  # the partials, out and lse: float32 for 16-bit inputs


# ----------------------------------------------------------------------------- counting
@dataclass
class BufferTraffic:
    loads: int = 0  # bytes of unmasked lanes loaded
    stores: int = 0  # bytes of unmasked lanes stored
    unique: int = 0  # bytes of distinct elements loaded (over the whole count)


@dataclass
class Launch:
    kernel: str
    grid: tuple[int, ...]
    buffers: dict[int, tuple[int, int]] = field(default_factory=dict)  # storage start -> (end, launch-local id)


class TrafficCounter:
    """What `count_traffic` collects: per launch and buffer, bytes loaded and stored."""

    def __init__(self) -> None:
        self.launches: list[Launch] = []
        self._per: list[dict[int, BufferTraffic]] = []  # per launch: storage start -> traffic
        self._addrs: dict[int, list[np.ndarray]] = {}  # storage start -> addresses loaded (all launches)
        self._elsize: dict[int, int] = {}
        self._starts = np.zeros(0, dtype=np.uint64)
        self._ends = np.zeros(0, dtype=np.uint64)
        self._keys: list[int] = []

    # the listener (lrkv.kernels.memcheck.listen) ------------------------------------------
    def begin(self, launch) -> bool:
        spans = {}
        for _, t in launch.tensors:
            st = t.untyped_storage()
            start = st.data_ptr()
            spans[start] = max(spans.get(start, start), start + st.nbytes())
        self.launches.append(Launch(launch.kernel, launch.grid or (0,),
                                    {s: (e, i) for i, (s, e) in enumerate(sorted(spans.items()))}))
        self._per.append({})
        keys = sorted(spans)
        self._keys = keys
        self._starts = np.array(keys, dtype=np.uint64)
        self._ends = np.array([spans[k] for k in keys], dtype=np.uint64)
        return True

    def access(self, addrs: np.ndarray, size: int, store: bool) -> None:
        """Count one load or store: addrs, the active lanes' addresses (uint64)."""
        if addrs.size == 0 or not self.launches:
            return
        idx = np.searchsorted(self._starts, addrs, side="right") - 1
        inside = (idx >= 0) & (addrs < self._ends[np.clip(idx, 0, None)])
        per = self._per[-1]
        for i in np.unique(idx[inside]):
            key = self._keys[int(i)]
            sel = addrs[idx == i]
            b = per.setdefault(key, BufferTraffic())
            if store:
                b.stores += int(sel.size) * size
            else:
                b.loads += int(sel.size) * size
                self._addrs.setdefault(key, []).append(sel)
                self._elsize[key] = size
        if not inside.all():  # an address in no argument's storage: named, never dropped
            b = per.setdefault(-1, BufferTraffic())
            n = int((~inside).sum()) * size
            b.stores, b.loads = (b.stores + n, b.loads) if store else (b.stores, b.loads + n)

    # the result -----------------------------------------------------------------------------
    def summary(self, known: dict[str, torch.Tensor | None]) -> dict[str, dict[str, int]]:
        """Bytes per named buffer over all launches: {name: {loads, stores, unique}}. `known`
        names the tensors the caller passed; the others are scratch, output or table by use."""
        names = {t.untyped_storage().data_ptr(): n for n, t in known.items() if t is not None}
        written_at: dict[int, int] = {}
        read_after_write: set[int] = set()
        for i, per in enumerate(self._per):
            for key, b in per.items():
                if b.loads and key in written_at and written_at[key] < i:
                    read_after_write.add(key)
            for key, b in per.items():
                if b.stores:
                    written_at.setdefault(key, i)
        out: dict[str, dict[str, int]] = {}
        for per in self._per:
            for key, b in per.items():
                if key in names:
                    name = names[key]
                elif key == -1:
                    name = "outside every argument"
                elif key in read_after_write:
                    name = "scratch"
                elif key in written_at:
                    name = "output"
                else:
                    name = "table"
                o = out.setdefault(name, dict(loads=0, stores=0, unique=0))
                o["loads"] += b.loads
                o["stores"] += b.stores
        for key, chunks in self._addrs.items():
            name = names.get(key) or ("scratch" if key in read_after_write else "table")
            out.setdefault(name, dict(loads=0, stores=0, unique=0))["unique"] += (
                int(np.unique(np.concatenate(chunks)).size) * self._elsize[key])
        return out

    def programs(self) -> list[tuple[str, int]]:
        """(kernel, programs) per launch."""
        return [(la.kernel, math.prod(la.grid)) for la in self.launches]


@contextlib.contextmanager
def count_traffic() -> Iterator[TrafficCounter]:
    """Count the bytes every interpreted launch in the block loads and stores (module doc)."""
    from ..kernels.memcheck import listen

    with listen(TrafficCounter()) as counter:
        yield counter


# ----------------------------------------------------------------------------- the prediction
@dataclass(frozen=True)
class Shape:
    """One call's sizes: per grid row, the slots it attends (decode: its length; extend: its
    position + 1) and, for the payload, every sequence's length."""

    H: int
    d_h: int
    r: int
    row_slots: tuple[int, ...]  # per grid row (decode: per sequence; extend: per query token)
    lengths: tuple[int, ...]  # per sequence: the valid tokens (the payload's cache bytes)
    cache_bytes: int = 2  # bytes per cache element (1: fp8)
    q_bytes: int = 2  # q, the bases and out at the compute dtype
    rope_exact: bool = False
    paged: bool = False
    page_size: int = PAGE_SIZE
    fp8_granularity: str = ""  # "" for a 16-bit cache
    new_tokens: tuple[int, ...] = ()  # extend: per sequence, its query tokens (its last rows of row_slots)

    @property
    def rows(self) -> int:
        return len(self.row_slots)

    def blocks(self, block_q: int) -> list[tuple[int, int]]:
        """(tokens, slots its last token attends) per program row: decode's rows are the
        sequences; extend's are blocks of up to block_q consecutive new tokens of a sequence,
        which load the cache up to their last token's slots."""
        if not self.new_tokens:
            return [(1, n) for n in self.row_slots]
        out, i = [], 0
        for n in self.new_tokens:
            for j in range(0, n, block_q):
                k = min(block_q, n - j)
                out.append((k, self.row_slots[i + j + k - 1]))
            i += n
        return out


def _tiles(n: int, split_size: int, block_t: int) -> int:
    """Tiles a row of n valid slots runs over, split into splits of split_size."""
    full, last = divmod(n, split_size)
    return full * -(-split_size // block_t) + -(-last // block_t)


def predict(shape: Shape, cfg) -> dict[str, int]:
    """The bytes a launch (`cfg`: a LaunchConfig) loads and stores, by what they are (module
    doc). Keys: shared, latent, basis_k, basis_v, q, rope_tables, page_table (loads);
    partials_w (stores), partials_r (loads), out (stores); loads, stores, moved (sums).
    A program row is a batch row (decode) or a block of extend tokens (`Shape.blocks`): it
    loads each cache slot up to its last token's once, for all its tokens."""
    H, d_h, r, e, eq = shape.H, shape.d_h, shape.r, shape.cache_bytes, shape.q_bytes
    R, S, NG = shape.rows, cfg.num_splits, cfg.n_groups
    block_q = getattr(cfg, "block_q", 1)
    blocks = shape.blocks(block_q)
    P = len(blocks)  # program rows
    valid = sum(n for _, n in blocks)  # slots loaded, over the program rows
    tiles = sum(_tiles(n, cfg.split_size, cfg.block_t) for _, n in blocks)
    p = dict(
        shared=NG * valid * 2 * d_h * e,  # S_K, S_V: once per head group and program row
        latent=valid * 2 * H * r * e,  # R^K, R^V: once per program row
        # per (row, split) program, its rows' q: one token's twice (the count showed it: the
        # shared logits and the projected query each load q), a block's once (it projects the
        # rows it holds); exact RoPE: once, then twice per tile
        q=((R * S + 2 * tiles) if shape.rope_exact else (2 if block_q == 1 else 1) * R * S) * H * d_h * eq,
        basis_k=(tiles if shape.rope_exact else P * S) * H * d_h * r * eq,  # per program; exact RoPE: per tile
        basis_v=R * H * d_h * r * eq,  # the combine, once per (row, head)
        rope_tables=NG * valid * 2 * d_h * ACC_BYTES if shape.rope_exact else 0,  # cos, sin rows per group
        page_table=0,
        partials_w=R * H * S * (2 + d_h + r) * ACC_BYTES,  # m, l, the d_h- and r-wide accumulators
        out=R * H * (d_h + 1) * ACC_BYTES,  # out (float32; the cast to q's dtype is torch's), lse
    )
    if shape.paged:  # one entry per slot lane and group (inside one page the lanes share an address)
        p["page_table"] = NG * valid * 4
    p["partials_r"] = p["partials_w"]
    p["loads"] = sum(p[k] for k in ("shared", "latent", "q", "basis_k", "basis_v", "rope_tables", "page_table",
                                    "partials_r"))
    p["stores"] = p["partials_w"] + p["out"]
    p["moved"] = p["loads"] + p["stores"]
    return p


def payload(shape: Shape, spec=None) -> int:
    """What the contract moves: cache bytes of the valid tokens (fp8: and their scales), the
    bases, q, out (q's dtype) and lse (float32)."""
    H, d_h, r = shape.H, shape.d_h, shape.r
    tokens = sum(shape.lengths)
    cache = tokens * (2 * d_h + 2 * H * r) * shape.cache_bytes
    if shape.fp8_granularity:
        from ..spec import AttentionSpec, fp8_scale_bytes

        cache += fp8_scale_bytes(spec or AttentionSpec.lrkv(H, d_h, r), shape.fp8_granularity, tokens=tokens)
    return cache + 2 * H * d_h * r * shape.q_bytes + shape.rows * H * (2 * d_h * shape.q_bytes + ACC_BYTES)


def group_overhead(H: int, d_h: int, r: int, group: int) -> float:
    """The shared stream re-read by each head group beyond the first, as a share of the cache
    bytes: 2·d_h·(H/G − 1) / (2·d_h + 2·H·r) (H = 18 in two groups of 9: +11 %)."""
    return 2 * d_h * (math.ceil(H / group) - 1) / (2 * d_h + 2 * H * r)


# ----------------------------------------------------------------------------- measuring
@dataclass
class TrafficRow:
    scale: str
    variant: str  # decode | paged | extend
    path: str  # wide | per_head | rope (exact RoPE)
    cache: str  # bf16 | fp8
    batch: int
    seq_len: int
    launch: dict  # the LaunchConfig the row ran with (asdict)
    launch_from: str  # "gpu": the launch table's sm_90 row, forced; "interpreter": the runtime's own
    payload: int
    predicted: dict  # predict(): bytes by kind, loads/stores/moved
    measured: dict  # by buffer: {loads, stores, unique}; and "total": the sums
    programs: list = field(default_factory=list)  # (kernel, programs) per launch
    seconds: float = 0.0
    new_tokens: int = 0  # extend: new tokens per sequence; 0 for decode

    @property
    def call(self) -> str:
        """The variant, extend with its new tokens per sequence (extend×16)."""
        return f"{self.variant}×{self.new_tokens}" if self.new_tokens else self.variant

    @property
    def loads(self) -> int:
        return self.measured["total"]["loads"]

    def to_dict(self) -> dict:
        return asdict(self)


def _spec(scale: str):
    from ..spec import preset

    return preset(scale).spec("lrkv")


def _inputs(spec, B: int, T: int, cache: str, variant: str, seed: int = 0, n_new: int = N_NEW):
    """(q, FactoredCache, basis_k, basis_v, cu_seqlens_q, lengths): full-width cache of T slots,
    ragged lengths (T and about 3/4 of it), bf16; fp8 quantized as the bench's fp8 row."""
    from ..reference.cache import FactoredCache
    from .families import make_inputs

    lengths = [T - (b % 2) * (T // 4 + 3) for b in range(B)]
    inp = make_inputs(spec, B, T, dtype=torch.bfloat16, seed=seed, lengths=lengths)
    parts = {p: inp[p] for p in ("shared_k", "shared_v", "latent_k", "latent_v")}
    scales = None
    if cache == "fp8":
        from ..reference.fp8_cache import quantize_cache
        from ..spec import as_dtype

        parts, scales = quantize_cache(parts, inp["lengths"], as_dtype(FP8_FORMAT), FP8_GRANULARITY)
    fc = FactoredCache(parts["shared_k"], parts["shared_v"], parts["latent_k"], parts["latent_v"], inp["lengths"],
                       None, scales)
    if variant == "paged":
        fc = fc.paginate(PAGE_SIZE, generator=torch.Generator().manual_seed(seed), extra_pages=0)
    q, cu = inp["q"], None
    if variant == "extend":
        g = torch.Generator().manual_seed(seed + 1)
        q = torch.randn(B * n_new, spec.n_heads, spec.head_dim, generator=g).to(torch.bfloat16)
        cu = torch.arange(0, B * n_new + 1, n_new, dtype=torch.int32)
    return q, fc, inp["basis_k"], inp["basis_v"], cu, lengths


def measure(scale: str, variant: str, path: str, cache: str, *, B: int = 2, T: int = 256,
            launch_from: str = "gpu", n_new: int = N_NEW) -> TrafficRow:
    """Run one call through `lrkv.kernels.decode.attend` in the interpreter, count its traffic
    and predict it. path: 'wide' | 'per_head' (no RoPE) or 'rope' (exact RoPE, the private
    path the launch picks for it). launch_from 'gpu' forces the GPU's launch (gpu_launch);
    'interpreter' leaves every choice to the runtime. n_new: extend's new tokens per sequence."""
    import time

    from ..kernels import runtime
    from ..kernels.decode import attend
    from ..kernels.launch import pick_launch
    from ..reference.rope import ExactRope

    if variant not in VARIANTS or path not in PATHS or cache not in CACHES:
        raise ValueError(f"variant in {VARIANTS}, path in {PATHS}, cache in {CACHES}; got {variant, path, cache}")
    spec = _spec(scale)
    H, d_h, r = spec.n_heads, spec.head_dim, spec.rank
    if variant == "extend" and not 1 <= n_new <= T // 2:
        raise ValueError(f"n_new: extend's new tokens per sequence lie in [1, T/2 = {T // 2}], got {n_new}")
    q, fc, bk, bv, cu, lengths = _inputs(spec, B, T, cache, variant, n_new=n_new)
    rope = ExactRope() if path == "rope" else None
    private = None if path == "rope" else path
    extend = variant == "extend"
    rows = q.shape[0]
    choose = dict(rows=rows, H=H, d_h=d_h, r=r, slots=fc.t_max, dtype=q.dtype, rope_exact=rope is not None,
                  paged=fc.paged, extend=extend, fp8=cache == "fp8", private=private, seqs=B if extend else None)
    with runtime.interpreter():
        if launch_from == "gpu":
            cfg = gpu_launch(**choose)
            overrides = launch_overrides(cfg)
        else:
            choose["B"] = choose.pop("rows")
            cfg = pick_launch(**choose, device=q.device)
            overrides = dict(private=private)
        t0 = time.perf_counter()
        with count_traffic() as counter:
            attend(q, fc, bk, bv, scale=spec.scale, rope=rope, cu_seqlens_q=cu, **overrides)
        seconds = time.perf_counter() - t0
    row_slots = tuple(L - n_new + i + 1 for L in lengths for i in range(n_new)) if extend else tuple(lengths)
    shape = Shape(H, d_h, r, row_slots, tuple(lengths), cache_bytes=1 if cache == "fp8" else 2,
                  rope_exact=rope is not None, paged=fc.paged,
                  fp8_granularity=FP8_GRANULARITY if cache == "fp8" else "", new_tokens=(n_new,) * B if extend else ())
    known = dict(q=q, basis_k=bk, basis_v=bv, lengths=fc.lengths, page_table=fc.page_table, cu_seqlens_q=cu,
                 **dict(zip(("shared_k", "shared_v", "latent_k", "latent_v"), fc.parts)))
    if fc.scales is not None:
        known.update({f"scale.{p}": fc.scales.of(p) for p in ("shared_k", "shared_v", "latent_k", "latent_v")})
    by = counter.summary(known)
    by["total"] = {k: sum(v[k] for v in by.values()) for k in ("loads", "stores", "unique")}
    return TrafficRow(scale, variant, path, cache, B, T, asdict(cfg), launch_from, payload(shape, spec),
                      predict(shape, cfg), by, counter.programs(), round(seconds, 2), n_new if extend else 0)


def measure_grid(scales=("2.5B", "6.3B"), seq_lens=(256, 1024), variants=VARIANTS, paths=PATHS, caches=CACHES,
                 *, B: int = 2, launch_from: str = "gpu", progress=None, new_tokens=(N_NEW,)) -> list[TrafficRow]:
    """Every (scale, T, variant, path, cache) launch, extend once per entry of new_tokens."""
    rows = []
    for scale in scales:
        for T in seq_lens:
            for variant in variants:
                for n_new in new_tokens if variant == "extend" else (N_NEW,):
                    for path in paths:
                        for cache in caches:
                            row = measure(scale, variant, path, cache, B=B, T=T, launch_from=launch_from,
                                          n_new=n_new)
                            rows.append(row)
                            if progress:
                                progress(row)
    return rows


# ----------------------------------------------------------------------------- rendering
TABLE_HEADERS = ("scale", "T", "call", "path", "cache", "G x groups, splits, tile, tokens", "pred", "meas", "meas/pred",
                 "moved", "unique", "shared x")


def _launch_cell(row: TrafficRow) -> str:
    c = row.launch
    return f"{c['group_size']} x {c['n_groups']}, {c['num_splits']}, {c['block_t']}, {c.get('block_q', 1)}"


def table_cells(row: TrafficRow) -> list[str]:
    """One row of the table; ratios are of the contract's payload (module doc)."""
    pay, pred, tot = row.payload, row.predicted, row.measured["total"]
    shared = sum(row.measured.get(p, {}).get("loads", 0) for p in ("shared_k", "shared_v"))
    shared_unique = sum(row.measured.get(p, {}).get("unique", 0) for p in ("shared_k", "shared_v"))
    return [row.scale, str(row.seq_len), row.call, row.path, row.cache, _launch_cell(row),
            f"{pred['loads'] / pay:.3f}", f"{tot['loads'] / pay:.3f}", f"{tot['loads'] / pred['loads']:.3f}",
            f"{(tot['loads'] + tot['stores']) / pay:.3f}", f"{tot['unique'] / pay:.3f}",
            f"{shared / shared_unique:.2f}" if shared_unique else ""]


def traffic_markdown(rows: list[TrafficRow]) -> str:
    lines = ["| " + " | ".join(TABLE_HEADERS) + " |", "|" + "|".join("---" if i < 6 else "---:"
                                                                     for i in range(len(TABLE_HEADERS))) + "|"]
    lines += ["| " + " | ".join(table_cells(r)) + " |" for r in rows]
    return "\n".join(lines)


def traffic_matrix_markdown(rows: list[TrafficRow]) -> str:
    """The same rows folded: one line per (scale, T, call), one column per (path, cache), each
    cell "measured loads / payload (measured / predicted)"; the last two the largest unique /
    payload of the line without and with exact RoPE (whose cos/sin tables are not payload)."""
    cols = list(dict.fromkeys((r.path, r.cache) for r in rows))
    lines = ["| scale | T | call | " + " | ".join(f"{p} {c}" for p, c in cols) + " | unique | unique, RoPE |",
             "|---|---:|---|" + "---:|" * (len(cols) + 2)]
    for key in dict.fromkeys((r.scale, r.seq_len, r.call) for r in rows):
        got = {(r.path, r.cache): r for r in rows if (r.scale, r.seq_len, r.call) == key}
        cells = [f"{got[c].loads / got[c].payload:.3f} ({got[c].loads / got[c].predicted['loads']:.3f})"
                 if c in got else "" for c in cols]
        unique = [max((r.measured["total"]["unique"] / r.payload for r in got.values() if (r.path == "rope") == rope),
                      default=None) for rope in (False, True)]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(cells) + " | "
                     + " | ".join("" if u is None else f"{u:.3f}" for u in unique) + " |")
    return "\n".join(lines)


def traffic_table(rows: list[TrafficRow]):
    from rich.table import Table

    table = Table(title="Triton decode traffic counted in the interpreter, x the contract's payload: pred/meas "
                        "loads, moved = loads + stores, unique = distinct bytes loaded; shared x: shared K/V "
                        "loads / distinct")
    for i, h in enumerate(TABLE_HEADERS):
        table.add_column(h, justify="left" if i < 6 else "right", no_wrap=True)
    for r in rows:
        c = table_cells(r)
        over = r.loads > 1.05 * r.predicted["loads"]
        if over:
            c[8] = f"[bold red]{c[8]}[/bold red]"
        table.add_row(*c)
    return table
