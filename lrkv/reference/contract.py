"""The kernel-level decode contract (DESIGN §4) and its input validation.

Every backend — the reference, the Triton kernel, a user's kernel — receives the same
arguments; `validate_decode_inputs` turns any malformed call into a ValueError/TypeError
that names the problem *before* a kernel launches, so an out-of-bounds access cannot happen.
"""

from __future__ import annotations

import torch

from .rope import ExactRope

FLOAT_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def check_shape(name: str, t: torch.Tensor, expected: tuple) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {list(expected)}, got {list(t.shape)}")


def check_tensors(named: dict) -> None:
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


FLOAT_INPUTS = ("shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v", "key_scale")


def check_dtypes_and_device(named: dict) -> None:
    """One float dtype for every float input, integer lengths, one device."""
    dtype = named["q"].dtype
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"q has dtype {dtype}; supported: {[str(d) for d in FLOAT_DTYPES]}")
    for name in FLOAT_INPUTS:
        t = named.get(name)
        if t is not None and t.dtype != dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {dtype}: all float inputs must match")
    if named["lengths"].dtype not in (torch.int32, torch.int64):
        raise TypeError(f"lengths must be int32 or int64, got {named['lengths'].dtype}")
    devices = {t.device for t in named.values()}
    if len(devices) > 1:
        raise ValueError(f"all inputs must be on one device, got {sorted(map(str, devices))}")


def check_scale_and_rope(scale, rope, d_h: int) -> None:
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not (scale > 0):
        raise ValueError(f"scale must be a positive float (1/sqrt(d_h)), got {scale!r}")
    if rope is not None:
        if not isinstance(rope, ExactRope):
            raise TypeError(f"rope must be None or ExactRope, got {type(rope).__name__}")
        if d_h % 2:
            raise ValueError(f"rope needs an even d_h, got {d_h}")


def check_finite_query_and_bases(named: dict) -> None:
    if not torch.isfinite(named["q"]).all():
        raise ValueError("q contains NaN or Inf")
    for name in ("basis_k", "basis_v"):
        if not torch.isfinite(named[name]).all():
            raise ValueError(f"{name} contains NaN or Inf")


def validate_decode_inputs(
    q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, *,
    scale, key_scale=None, rope=None, check_finite: bool = True,
) -> tuple[int, int, int, int, int]:
    """Check the decode contract; return (B, T_max, H, d_h, r)."""
    named = dict(q=q, shared_k=shared_k, shared_v=shared_v, latent_k=latent_k, latent_v=latent_v,
                 basis_k=basis_k, basis_v=basis_v, lengths=lengths)
    if key_scale is not None:
        named["key_scale"] = key_scale
    check_tensors(named)
    if q.dim() != 3:
        raise ValueError(f"q must be [B, H, d_h], got {q.dim()} dims {list(q.shape)}")
    if shared_k.dim() != 3:
        raise ValueError(f"shared_k must be [B, T_max, d_h], got shape {list(shared_k.shape)}")
    if latent_k.dim() != 4:
        raise ValueError(f"latent_k must be [B, T_max, H, r], got shape {list(latent_k.shape)}")
    B, H, d_h = q.shape
    T = shared_k.shape[1]
    r = latent_k.shape[3]
    check_shape("shared_k", shared_k, (B, T, d_h))
    check_shape("shared_v", shared_v, (B, T, d_h))
    check_shape("latent_k", latent_k, (B, T, H, r))
    check_shape("latent_v", latent_v, (B, T, H, r))
    check_shape("basis_k", basis_k, (H, d_h, r))
    check_shape("basis_v", basis_v, (H, d_h, r))
    check_shape("lengths", lengths, (B,))
    if key_scale is not None:
        check_shape("key_scale", key_scale, (B, T, H))
    check_dtypes_and_device(named)
    if B and (lengths.min() < 0 or lengths.max() > T):
        raise ValueError(
            f"lengths must lie in [0, T_max={T}], got min {int(lengths.min())}, max {int(lengths.max())}"
        )
    check_scale_and_rope(scale, rope, d_h)
    if check_finite:
        check_finite_query_and_bases(named)
        valid = torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]  # [B, T]
        for name in ("shared_k", "shared_v", "latent_k", "latent_v", "key_scale"):
            t = named.get(name)
            if t is None:
                continue
            m = valid.reshape(B, T, *([1] * (t.dim() - 2)))
            if not torch.isfinite(torch.where(m, t, 0)).all():
                raise ValueError(f"{name} contains NaN or Inf inside the valid length of some sequence")
    return B, T, H, d_h, r
