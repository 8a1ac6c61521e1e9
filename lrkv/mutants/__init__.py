"""lrkv.mutants — deliberately broken backends, each a bug the harness must reject."""
