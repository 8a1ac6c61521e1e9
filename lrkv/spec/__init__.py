"""lrkv.spec — what is verified: attention specs, paper presets, accounting."""

from .accounting import (
    break_even_rank, cache_bytes, cache_components, cache_elements, cache_ratio,
    decode_arithmetic_ratio, decode_bytes, decode_macs, fp8_scale_bytes, fp8_scale_elements,
    key_scale_overhead, kv_param_count,
    kv_param_ratio, lrkv_cache_ratio, lrkv_param_ratio, mha_cache_elements, model_cache_bytes,
    padded_rank, per_device_cache_elements, rank_ceiling, tp_cache_ratio,
)
from .attention import FAMILIES, ROPE_MODES, AttentionSpec
from .dtypes import as_dtype, dtype_bytes, dtype_name
from .presets import DEEPSEEK_V3_MLA, MLRA2, MLRA4, PAPER_SCALES, PaperScale, preset

__all__ = [name for name in dir() if not name.startswith("_")]
