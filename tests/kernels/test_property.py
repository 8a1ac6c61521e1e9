"""Property test: random small shapes, lengths (0 allowed), split counts, RoPE and
key_scale — the split-K kernel always passes the harness's rule against the float64 oracle."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lrkv.kernels.decode import decode_attention
from lrkv.kernels.testing import check, kernel_case

from ..test_helpers.device import wide_exact_dtype

pytestmark = pytest.mark.equivalence


# The CI profile runs 10 fixed examples (each is an interpreter run); under
# HYPOTHESIS_PROFILE=dev the profile's example count and randomness apply, for hunting.
_DEV = settings.default.max_examples > 100 and not settings.default.derandomize


@settings(max_examples=settings.default.max_examples if _DEV else 10, deadline=None, derandomize=not _DEV,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(B=st.integers(1, 3), T=st.integers(1, 40), H=st.integers(1, 6), r=st.integers(1, 20),
       splits=st.integers(1, 9), data=st.data())
def test_property_random_shapes(B, T, H, r, splits, data):
    lengths = data.draw(st.lists(st.integers(0, T), min_size=B, max_size=B))
    rope = data.draw(st.sampled_from(["none", "exact"]))
    dtype = data.draw(st.sampled_from([torch.float64, torch.float32]))
    # both private-stream paths, and group sizes that pad the wide tile and the head block
    private = data.draw(st.sampled_from(["wide", "per_head"]))
    if private == "wide" and dtype == torch.float64:
        dtype = wide_exact_dtype()  # natively float64 takes FMA products, which have no wide path
    group_size = data.draw(st.one_of(st.none(), st.integers(1, H)))
    case = kernel_case(H=H, d_h=16, r=r, lengths=lengths, t_max=T, seed=T * 7 + r, rope=rope, dtype=dtype,
                       key_scale=data.draw(st.booleans()))
    check(decode_attention, case, num_splits=splits, private=private, group_size=group_size)
