"""A paged cache (levels kernel-paged and kernel-extend): slots per page, page order, shared prefix,
the latents' stride order (NHD or head-major HND), the pool's size, and whether its parts are
handed over as views of a larger allocation (lrkv.reference.cache_layouts.pool_views)."""

from __future__ import annotations

from dataclasses import dataclass

from ...checks import check_bool, check_int
from ...reference.cache_layouts.pool_views import DENSE, VIEWS, check_view
from . import MAX_T, Feature

LEVELS = ("kernel-paged", "kernel-extend")
MAX_PAGE_SIZE = 1 << 16
MAX_POOL = 1 << 16
LARGE_POOL = 1000  # "thousands of pages": the pool size the feature asks for
# its twin dimensions (lrkv.verify.twins): an extend case's cache paged or contiguous; the pools'
# view (a backend that needs dense pools declines the others: protocol.pool_views)
DIMS = ("paging", "pool_view")
TWIN_PAGES = (16, 4, 1)  # page sizes a contiguous extend case's twin may take, nearest first
POW2_SIZES = (2, 4, 8, 16, 32)  # the sizes a drawn case takes (`sizes`)
ODD_SIZES = (3, 5, 6, 7, 11)  # not powers of two
HUNT_POOL = 1500  # unused pages below the used ones, in one drawn paged case of five
KEYS = {"page_size": "size", "page_shuffle": "shuffle", "shared_prefix": "shared_prefix", "page_hnd": "hnd",
        "page_pool": "pool", "pool_view": "view"}


@dataclass(frozen=True)
class Paged:
    size: int = 0  # slots per page (>= 1 at kernel-paged; 0 at kernel-extend: a contiguous cache)
    shuffle: bool = True  # physical pages in a random order (False: sequence-major order)
    shared_prefix: int = 0  # sequences 0 and 1 share their first shared_prefix tokens' pages (whole pages)
    hnd: bool = False  # latents, key scales and per-token-head scales head-major in memory ([P, H, page, ...])
    pool: int = 0  # unused pages below the used ones: a pool of thousands puts page indices near its end
    view: str = DENSE  # the parts as views of a larger allocation (pool_views.VIEWS)

    def check(self, case) -> None:
        check_int("page_size", self.size, minimum=0, maximum=MAX_PAGE_SIZE)
        check_bool("page_shuffle", self.shuffle)
        check_int("shared_prefix", self.shared_prefix, minimum=0, maximum=MAX_T)
        check_bool("page_hnd", self.hnd)
        check_int("page_pool", self.pool, minimum=0, maximum=MAX_POOL)
        check_view(self.view)
        if case.level not in LEVELS:
            raise ValueError("page_size, page_shuffle, shared_prefix, page_hnd, page_pool and pool_view apply to "
                             "levels kernel-paged and kernel-extend only")
        if (self.hnd or self.pool or self.view != DENSE) and self.size < 1:
            raise ValueError("page_hnd, page_pool and pool_view need page_size >= 1 (a paged cache)")
        if self.shared_prefix:
            if self.size < 1 or case.batch < 2:
                raise ValueError("shared_prefix needs page_size >= 1 and at least two sequences")
            if self.shared_prefix % self.size:
                raise ValueError(f"shared_prefix ({self.shared_prefix}) must be a whole number of pages "
                                 f"(page_size {self.size})")
            if self.shared_prefix > min(case.lengths[:2]):
                raise ValueError(f"shared_prefix ({self.shared_prefix}) must not exceed the lengths of "
                                 f"sequences 0 and 1 ({list(case.lengths[:2])})")

    def flags(self) -> str:
        return "".join((f"+page{self.size}" if self.size else "", "" if self.shuffle else "+inorder",
                        f"+prefix{self.shared_prefix}" if self.shared_prefix else "", "+hnd" if self.hnd else "",
                        f"+pool{self.pool}" if self.pool else "", "" if self.view == DENSE else f"+{self.view}"))

    def shapes(self) -> dict:
        return {"page_size": self.size} if self.size else {}


def twin_value(case, dim: str):
    pages = case.pages or Paged()
    return pages.size if dim == "paging" else pages.view


def twin_candidates(case, dim: str) -> list:
    """paging (extend only): a contiguous cache paged (a server layout takes pages only), or a
    paged one contiguous. pool_view: dense pools."""
    if dim == "pool_view":
        return [DENSE] if twin_value(case, dim) != DENSE else []
    if case.level != "kernel-extend":
        return []
    return [0] if twin_value(case, dim) else list(TWIN_PAGES)


def twin_apply(changes: dict) -> dict:
    """The case's flat keys for a twin's changes: at another page size a whole-page prefix is
    no longer shared; a contiguous cache has no page layout (stride order, pool, view)."""
    out = {}
    if "paging" in changes:
        out = dict(page_size=changes["paging"], shared_prefix=0, page_shuffle=True)
        if not changes["paging"]:
            out.update(page_hnd=False, page_pool=0, pool_view=DENSE)
    if "pool_view" in changes:
        out["pool_view"] = changes["pool_view"]
    return out


# The option's hypothesis draws (lrkv.verify.strategies composes them into a case, in an order
# that old hunt seeds replay). hypothesis is imported when a draw is made, not with the case.

def sizes(t_max: int):
    """Slots per page: 1; a power of two up to 32; a non-power of two (3, 5, 6, 7, 11); a size
    that does not divide T_max (when one exists below it); T_max itself (one page); or a page
    larger than T_max (one page, slots past T_max in it)."""
    from hypothesis import strategies as st

    not_dividing = [p for p in range(2, t_max) if t_max % p]
    return st.one_of(
        st.just(1),
        st.sampled_from(POW2_SIZES),
        st.sampled_from(ODD_SIZES),
        st.sampled_from(not_dividing) if not_dividing else st.just(t_max + 1),
        st.sampled_from((t_max, t_max + 1, t_max + 3)),
    )


def lengths(t_max: int, size: int, lo: int = 0):
    """A length in [lo, T_max], often a boundary: 0, 1, T_max, or a multiple of the page ± 1."""
    from hypothesis import strategies as st

    marks = {0, 1, t_max}
    if size:
        for k in range(1, t_max // size + 1):
            marks.update((k * size - 1, k * size, k * size + 1))
    marks = sorted(n for n in marks if lo <= n <= t_max)
    return st.one_of(st.integers(lo, t_max), st.sampled_from(marks))


def draw_prefix(draw, size: int, lengths: list[int]) -> int:
    """A shared prefix of whole pages, at most sequences 0 and 1's lengths."""
    from hypothesis import strategies as st

    return size * draw(st.integers(1, min(lengths[:2]) // size))


def draw_option(draw, size: int, shared: int, seed: int) -> Paged:
    """The option of a drawn case: shuffled two times in three; head-major pages, a large pool and
    the pools' view from the seed, not from new draws, so that old hunt seeds draw the same values."""
    from hypothesis import strategies as st

    shuffle = draw(st.sampled_from((True, True, False))) if size else True
    return Paged(size, shuffle, shared, hnd=bool(size) and seed % 2 == 1,
                 pool=HUNT_POOL if size and seed % 5 == 3 else 0, view=VIEWS[seed // 2 % len(VIEWS)] if size else DENSE)


def features() -> list:
    """The paged features (lrkv.verify.features): page sizes, order, sharing, boundaries."""

    def page(c) -> Paged:
        return c.pages or Paged()

    return [
        Feature("page=1", LEVELS, lambda c: page(c).size == 1, "one slot per page"),
        Feature("page non-power-of-two", LEVELS, lambda c: page(c).size & (page(c).size - 1) > 0,
                "page and row computed with a shift and a mask are wrong"),
        Feature("page>=16", LEVELS, lambda c: page(c).size >= 16, "pages spanning a whole tile"),
        Feature("page not dividing t_max", LEVELS, lambda c: page(c).size > 0 and c.t_max % page(c).size != 0,
                "a last page only partly used"),
        Feature("pages shared", LEVELS, lambda c: page(c).shared_prefix > 0,
                "a physical page in two sequences' page tables (a shared prefix)"),
        Feature("pages shuffled", LEVELS, lambda c: page(c).size > 0 and page(c).shuffle,
                "physical pages out of order"),
        Feature("pages in order", LEVELS, lambda c: page(c).size > 0 and not page(c).shuffle,
                "physical pages in sequence order"),
        Feature("length at page boundary", LEVELS,
                lambda c: page(c).size > 0 and any(n > 0 and n % page(c).size == 0 for n in c.lengths),
                "a length that ends exactly on a page (its last page full)"),
        Feature("last page partial", LEVELS,
                lambda c: page(c).size > 1 and any(n % page(c).size for n in c.lengths),
                "a last page only partly filled (its length off by one reads garbage)"),
        Feature("pages head-major (HND)", LEVELS, lambda c: page(c).hnd,
                "latents laid out [P, H, page, r]: a kernel assuming NHD strides reads the wrong slots"),
        Feature("pages token-major (NHD)", LEVELS, lambda c: page(c).size > 0 and not page(c).hnd,
                "latents laid out [P, page, H, r]"),
        Feature("pool of thousands of pages", LEVELS, lambda c: page(c).pool >= LARGE_POOL,
                "page indices near the end of a large pool (index arithmetic that overflows or clamps)"),
        # capabilities: a backend that needs dense pools declines them (protocol.pool_views)
        Feature("pool a view: K/V interleaved", LEVELS, lambda c: page(c).view == "kv-interleaved",
                "K and V of a page in one allocation: a page pitch from the shape, not the stride, is wrong",
                dim="pool_view"),
        Feature("pool a view: pages apart", LEVELS, lambda c: page(c).view == "pages-apart",
                "pages padded apart, the pool at a storage offset: dense page addressing reads NaN",
                dim="pool_view"),
        Feature("pool a view: row pitch padded", LEVELS, lambda c: page(c).view == "rows-padded",
                "rows padded for alignment (FlashMLA's 656-byte fp8 rows): a row pitch from the width is wrong",
                dim="pool_view"),
    ]
