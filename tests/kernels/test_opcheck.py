"""The Triton decode is a `torch.library` custom op (lrkv::factored_decode): it must pass
`torch.library.opcheck` (schema, fake-tensor kernel, dispatch), as vLLM and FlashAttention
check theirs, so that torch.compile and CUDA graphs can take it."""

from __future__ import annotations

import pytest
import torch

from lrkv.kernels import decode
from lrkv.kernels.testing import kernel_case, on_device
from lrkv.verify.levels.kernel import make_kernel_inputs

pytestmark = [
    pytest.mark.gpu,
    # opcheck's fake-tensor and dispatch passes drive the kernel in ways Triton's CPU
    # interpreter turns into a crash of the process: natively only (ci/gpu-check)
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: opcheck crashes Triton's CPU "
                                                             "interpreter; ci/gpu-check runs it natively"),
]


@pytest.mark.parametrize("paged", [False, True])
def test_the_decode_op_passes_opcheck(paged, monkeypatch):
    seen = []
    real = torch.ops.lrkv.factored_decode

    class Recorder:  # the wrappers call torch.ops.lrkv.factored_decode: record its arguments
        def factored_decode(self, *args, **kwargs):
            seen.append((args, kwargs))
            return real(*args, **kwargs)
    monkeypatch.setattr(decode.torch.ops, "lrkv", Recorder())
    case = kernel_case(H=3, d_h=16, r=4, lengths=(9, 20, 5), dtype="float32", rope="exact",
                       level="kernel-paged" if paged else "kernel", **({"page_size": 8} if paged else {}))
    if paged:
        from lrkv.verify.levels.paged import make_paged_inputs
        inp = on_device(make_paged_inputs(case))
        inp.call(decode.paged_decode_attention)
    else:
        inp = on_device(make_kernel_inputs(case))
        inp.call(decode.decode_attention)
    (args, kwargs), = seen
    torch.library.opcheck(real.default, args, kwargs,
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))
