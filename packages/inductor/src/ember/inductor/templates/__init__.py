"""Kernel templates: hand-structured Triton kernels (tiled matmul) that ember's loop IR fills
with fused prologues and epilogues. `gemm.py` finds them in the scheduled program,
`gemm_writer.py` writes their source, `configs.py` lists their block configurations and
`gemm_choice.py` chooses, on the GPU, between a template and the vendor library by timing.
"""
