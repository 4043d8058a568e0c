"""Tests for cs336report.parsers.kernels, the CUDA kernel name classifier."""

import pandas as pd
import pytest

from cs336report.parsers.kernels import CLASSES, classify, is_gemm, summarise_by_class

# Kernel names as nsys reports them (cuBLAS/cuBLASLt, CUTLASS, PyTorch at::native,
# Triton from torch.compile, flash attention, memory operations).
REAL_NAMES = [
    # gemm
    ("ampere_sgemm_128x64_tn", "gemm"),
    ("ampere_sgemm_32x32_sliced1x4_nn", "gemm"),
    ("volta_sgemm_128x64_nn", "gemm"),
    ("turing_fp16_s1688gemm_fp16_128x256_ldg8_f2f_nn", "gemm"),
    ("ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_32x3_nn", "gemm"),
    ("ampere_fp16_s1688gemm_fp16_128x128_ldg8_f2f_stages_32x1_nn", "gemm"),
    ("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", "gemm"),
    ("sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_stage3_warpsize2x2x1_tensor16x8x8_kernel", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(T1::Params)", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x128_8x4_nt_align1>(T1::Params)", "gemm"),
    ("cutlass3x_sm90_tensorop_gemm_f16_f16_f32_void_f16_128x256x64_1x2x1_0_tnn_align8_warpspecialized_cooperative_epi_tma", "gemm"),
    ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("nvjet_tst_64x8_64x16_2x1_v_bz_splitK_TNT", "gemm"),
    ("nvjet_tss_64x8_64x16_2x1_v_bz_splitK_TNT", "gemm"),
    ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(cublasSplitKParams<float>, const float *, const float *, float *, const float *, const float *, const float *, const float *, float *, void *, long, float *, int *)", "gemm"),
    ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, cublasGemvParamsEx<int, cublasGemvTensorStrided<const float>, cublasGemvTensorStrided<const float>, cublasGemvTensorStrided<float>, float>>(T13, T6, T6)", "gemm"),
    ("triton_tem_fused_mm_0", "gemm"),
    ("triton_tem_fused_addmm_1", "gemm"),
    # attention
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<(int)128, (int)128, (int)64, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)128, (int)64, (int)4, cutlass::bfloat16_t>>, (bool)0, (bool)1, (bool)0, (bool)0, (bool)1, (bool)1, (bool)0, (bool)0>(Flash_fwd_params)", "attention"),
    ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)", "attention"),
    ("void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<(int)128, (int)64, (int)128, (int)8, (int)2, (int)4, (int)2, (bool)0, (bool)0, cutlass::half_t>>(Flash_bwd_params)", "attention"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", "attention"),
    ("fmha_v2_flash_attention_fp16_64_128_S_128_sm80_kernel", "attention"),
    ("flash_fwd_kernel", "attention"),
    ("_attn_fwd", "attention"),
    # the cuDNN SDPA backward's helpers (H100, torch 2.11 + cuDNN, the optimized step)
    ("void cudnn::fusion::compute_dot_do_o<true>(void const*, void const*, void*, void*, unsigned int, unsigned int)", "attention"),
    ("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int)", "attention"),
    ("_fwd_kernel", "attention"),
    # softmax
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<(int)4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(T4 *, const T2 *, int)", "softmax"),
    ("void at::native::<unnamed>::cunn_SoftMaxForward<(int)4, float, float, float, at::native::<unnamed>::SoftMaxForwardEpilogue>(T4 *, const T2 *, int)", "softmax"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, at::native::(anonymous namespace)::SoftMaxBackwardEpilogue>(float*, float const*, float const*, int)", "softmax"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForwardGmem<4, float, float, float, at::native::(anonymous namespace)::SoftMaxForwardWithMulEpilogue, long>(float*, float const*, long)", "softmax"),
    ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false, false>(float *, const float *, int, int, int, const bool *, int, bool)", "softmax"),
    ("triton_per_fused__softmax_0", "softmax"),
    ("triton_red_fused__log_softmax_1", "softmax"),
    # optimizer
    ("void at::native::multi_tensor_apply_kernel<at::native::TensorListMetadata<(int)4>, at::native::FusedAdamMathFunctor<float, (int)4, (at::native::ADAM_MODE)1, (bool)0>, …", "optimizer"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, bool, float, float, float, float, float, float*, float*>(T1, T2, T3...)", "optimizer"),
    ("void at::native::<unnamed>::multi_tensor_apply_kernel<at::native::<unnamed>::TensorListMetadata<(int)2>, at::native::<unnamed>::BinaryOpListAlphaFunctor<float, (int)2, (int)2, (int)0>, std::plus<float>, float>(T1, T2, T3...)", "optimizer"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::AdamW_step_functor<float>, std::array<char*, 4ul>>(int, T2, T3)", "optimizer"),
    # an AdamW step compiled by Inductor (cs336report.lm.master_weights): one kernel per tensor, named by its operators
    ("triton_poi_fused__to_copy_add_addcmul_div_lerp_mul_sqrt_sub_0", "optimizer"),
    ("triton_poi_fused_add_addcmul_div_lerp_mul_sqrt_sub_3", "optimizer"),
    # copy/memset
    ("[CUDA memcpy Device-to-Device]", "copy/memset"),
    ("[CUDA memcpy HtoD]", "copy/memset"),
    ("[CUDA memset]", "copy/memset"),
    ("Memset", "copy/memset"),
    ("Memcpy DtoD (Device -> Device)", "copy/memset"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase &)::[lambda() (instance 3)]::operator ()() const::[lambda() (instance 7)]::operator ()() const::[lambda(float) (instance 1)], std::array<char *, (unsigned long)2>, (int)4, TrivialOffsetCalculator<(int)1, unsigned int>, TrivialOffsetCalculator<(int)1, unsigned int>, at::native::memory::LoadWithCast<(int)1>, at::native::memory::StoreWithCast<(int)1>>(int, T1, T2, T3, T4, T5, T6)", "copy/memset"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul>>(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)", "copy/memset"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy_contig<at::native::(anonymous namespace)::OpaqueType<8u>, unsigned int, 1, 128, 1>(at::native::(anonymous namespace)::OpaqueType<8u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<8u>, unsigned int, 128, 1>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)", "copy/memset"),
    ("triton_poi_fused__to_copy_0", "copy/memset"),
    ("triton_poi_fused_clone_2", "copy/memset"),
    # reduction
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>>(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)", "reduction"),
    ("void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator ()(at::TensorIterator &)::[lambda(float, float) (instance 1)]>, unsigned int, float, (int)4>>(T3)", "reduction"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)", "reduction"),
    ("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float *, float *, const float *, const long *, const float *, bool, long, long, long, long)", "reduction"),
    ("triton_red_fused_add_mean_mul_pow_rsqrt_0", "reduction"),
    ("triton_per_fused_native_layer_norm_1", "reduction"),
    # elementwise
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>>(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)", "elementwise"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>>(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>>(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>> const&)::{lambda(int)#1})", "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)2>>(int, T2, T3)", "elementwise"),
    ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, at::native::templates::cuda::normal_and_transform<float, float, 4, at::CUDAGeneratorImpl*>(at::TensorIteratorBase&, at::CUDAGeneratorImpl*, at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>(at::TensorBase const&, double, double, at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1})::{lambda(curandStatePhilox4_32_10*)#2}>(long, at::PhiloxCudaState, T3, T4)", "elementwise"),
    ("triton_poi_fused_add_mul_silu_3", "elementwise"),
    ("triton_poi_fused_mul_silu_2", "elementwise"),
    # other
    ("void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, long, unsigned int>::Policy800, false, long, long, unsigned int, int, cub::detail::identity_decomposer_t>(int *, int *, unsigned int *, unsigned int *, const long *, long *, const long *, long *, int, int, int, cub::detail::identity_decomposer_t)", "other"),
    ("mysterious_custom_kernel", "other"),
    ("", "other"),
]


@pytest.mark.parametrize("name, expected", REAL_NAMES, ids=[f"{e}:{n[:50]}" for n, e in REAL_NAMES])
def test_classify_real_names(name, expected):
    assert classify(name) == expected


def test_every_class_is_covered_and_known():
    seen = {expected for _, expected in REAL_NAMES}
    assert seen == set(CLASSES)


def test_optimizer_wins_over_elementwise_and_softmax_over_reduce():
    assert classify("void at::native::elementwise_kernel<128, 4, FusedAdamMathFunctor<float>>") == "optimizer"
    assert classify("void at::native::reduce_kernel<softmax_reduce>") == "softmax"


def test_lambdas_are_not_mistaken_for_lamb_optimizer():
    name = "void at::native::vectorized_elementwise_kernel<4, at::native::{lambda(float)#1}>(int, T2, T3)"
    assert classify(name) == "elementwise"


def test_is_gemm():
    assert is_gemm("ampere_sgemm_128x64_tn")
    assert is_gemm("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT")
    assert not is_gemm("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::half_t>>()")
    assert not is_gemm("triton_poi_fused_add_0")


def test_summarise_by_class():
    df = pd.DataFrame(
        {
            "name": ["ampere_sgemm_128x64_tn", "nvjet_tst_64x8_64x16_2x1_v_bz_splitK_TNT", "triton_poi_fused_add_0"],
            "total_ns": [600.0, 200.0, 200.0],
            "instances": [2.0, 1.0, 5.0],
        }
    )
    out = summarise_by_class(df)
    assert out["class"].tolist() == ["gemm", "elementwise"]
    assert out["total_ns"].tolist() == [800.0, 200.0]
    assert out["kernels"].tolist() == [2, 1]
    assert out["share"].tolist() == pytest.approx([0.8, 0.2])
    assert summarise_by_class(df.iloc[0:0]).empty
