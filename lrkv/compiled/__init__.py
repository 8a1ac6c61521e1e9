"""lrkv.compiled — verified engines of the LRKV decode step (DESIGN §2, §4; docs/export.md).

In dependency order (each module imports only those above it):

    config           ExportConfig: what an engine bakes in (spec, level, dtype, T_max/B ranges)
    signature        the flat tensor signature, and the Python-side checks run before an engine
    program          the traced step: export-friendly Eqs. 6–7, the token projection, the
                     nn.Modules (KernelDecode, LayerStep), torch.export with dynamic B and T_max
    engine           the Engine interface, engine_class, progress lines (say, step, QUIET)
    onnx_engine      torch.onnx (dynamo) -> onnxruntime
    aoti_engine      AOTInductor package
    tensorrt_engine  torch-tensorrt dynamo compile (CUDA)
    engine_backends  the onnxruntime / aoti / tensorrt harness backends, and EngineBackend
    manifest         the manifest format, file and weight hashes
    export           verified release: build -> verify on the length grid -> gate -> release
    check            `lrkv export --check`: re-verification against the manifest
    export_cli       `lrkv export`

Importing this package imports neither onnxruntime nor torch_tensorrt.
"""
