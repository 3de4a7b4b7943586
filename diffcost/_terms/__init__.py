"""Cost terms shared by training, serving and plots: GEMMs, the layer's GEMM shapes, attention,
memory-bound kernels and launches, collectives, the runtime memory reserve."""
