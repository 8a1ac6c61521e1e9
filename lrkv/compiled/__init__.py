"""lrkv.compiled — verified engines of the LRKV decode step (DESIGN §2, §4; docs/export.md).

    config        ExportConfig: what an engine bakes in (spec, level, dtype, T_max/B ranges)
    signature     the flat tensor signature, and the Python-side checks run before an engine
    core          export-friendly decode math (masks by tensor ops, NaN-safe, empty rows)
    project       the new token's projections in export form (native RMSNorm at opset >= 23)
    modules       nn.Modules: KernelDecode, LayerStep (functional cache append)
    program       torch.export with a shared, bounded dynamic T_max (and batch)
    engine        the Engine interface; onnx_engine, aoti_engine, tensorrt_engine
    backends      onnxruntime / aoti / tensorrt backends for the harness, EngineBackend
    verification  the release grid over the exported range, run through the harness
    harness       the one adapter to lrkv.verify (runner, policy, report, gate)
    manifest      manifest format, hashes;  export: verified release;  check: re-verification
    cli           `lrkv export`

Importing this package imports neither onnxruntime nor torch_tensorrt.
"""
