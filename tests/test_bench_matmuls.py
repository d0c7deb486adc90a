"""bench/ct2_matmuls.py reads oneDNN's verbose lines: each engine's format, counted by hand."""

from bench.ct2_matmuls import matmul_shape, projections

# as torch's oneDNN (mtcli) and CTranslate2's oneDNN 3.1.1 print them
MTCLI_IP = (
    "onednn_verbose,v1,primitive,exec,cpu,inner_product,brg_matmul:avx512_core,forward_inference,"
    "src:f32::blocked:ab::f0 wei:f32::blocked:AB16b64a::f0 bia:f32::blocked:a::f0 "
    "dst:f32::blocked:ab::f0,attr-scratchpad:user,,mb1350ic256oc768,2.5"
)
MTCLI_REORDER = (
    "onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32::blocked:ab::f0 "
    "dst:f32::blocked:AB16b64a::f0,attr-scratchpad:user,,256x256,0.0671387"
)
CT2_GEMM = (
    "onednn_verbose,exec,cpu,gemm_api,,undef,src_f32::blocked:ab:f0 wei_f32::blocked:ba:f0 "
    "dst_f32::blocked:ab:f0,,,284x1024:1024x256,0.5"
)
CT2_ATTENTION = (
    "onednn_verbose,exec,cpu,gemm_api,,undef,src_f32::blocked:ab:f0 wei_f32::blocked:ba:f0 "
    "dst_f32::blocked:ab:f0,attr-oscale:common:0.125 ,,6x64:64x6,0.00708008"
)


def test_shapes_of_both_formats():
    assert matmul_shape(MTCLI_IP) == (1350, 256, 768)
    assert matmul_shape(CT2_GEMM) == (284, 1024, 256)
    assert matmul_shape(CT2_ATTENTION) == (6, 64, 6)
    assert matmul_shape(MTCLI_REORDER) is None  # a weight reorder is not a product
    assert matmul_shape("onednn_verbose,info,cpu,runtime:OpenMP,nthr:2") is None


def test_projections_count_only_the_timed_pass_and_the_model_widths():
    big = MTCLI_IP.replace("mb1350", "mb1000000").replace(",2.5", ",2500")  # 393.2 GFLOP, 2.5 s
    stdout = "\n".join(
        [big, "timed pass", big, CT2_GEMM.replace(",0.5", ",500"), CT2_ATTENTION, MTCLI_REORDER,
         "4.0 300 200"]
    )  # fmt: skip
    got = projections(stdout, {256, 1024})
    # the line before "timed pass" and the attention product (inner dimension 64) left out
    assert got["projection_calls"] == 2
    assert got["projection_gflop"] == 393  # 2 * 1e6 * 256 * 768 + 2 * 284 * 1024 * 256 = 393.4e9
    assert got["projection_s"] == 3.0
    assert got["projection_gflop_per_s"] == 131
    assert got["pass_s"] == 4.0 and got["rest_s"] == 1.0
