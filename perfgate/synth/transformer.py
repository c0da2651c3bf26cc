"""Transformer-like synthetic kernel sequences with a known structure, for
:class:`perfgate.synth.writer.SynthSpec` ``sequence``.

A step is: head (embedding gather) → ``layers`` decoder layers → tail (final norm, lm_head
matmul, argmax). Each layer is an attention block (RmsNorm, QKV matmul, rotary embedding,
FlashAttentionScore, output matmul, residual Add) and an FFN block (RmsNorm, gate-up matmul,
SwiGlu, down matmul, residual Add), or with ``moe`` a MoE block (RmsNorm, router matmul,
MoeGatingTopKSoftmax, MoeInitRouting dispatch, GroupedMatmul, SwiGlu, GroupedMatmul,
MoeFinalizeRouting combine, Add) in every layer after the first ``dense_layers``. With
``decomposed_rmsnorm`` the final norm is spelled as element-wise kernels (Cast, Pow,
ReduceMean, Add, Rsqrt, Mul, Mul, Cast) — the RMSNorm fusion candidate — instead of one
RmsNorm kernel. Entries are ``(name, OP type, core type, mean duration us)``.
"""
from __future__ import annotations

from pathlib import Path

from perfgate.synth.writer import SynthSpec, write_capture

_V, _C, _MIX = "AI_VECTOR_CORE", "AI_CORE", "MIX_AIC"
RMSNORM = ("aclnnRmsNorm_RmsNormAiCore_RmsNorm", "RmsNorm", _V, 20.0)
MATMUL = ("aclnnMatmul_MatMulV3Common_MatMulV3", "MatMulV3", _C, 150.0)
ADD = ("aclnnAdd_AddAiCore_Add", "Add", _V, 10.0)
ATTENTION = (RMSNORM, MATMUL,
             ("aclnnApplyRotaryPosEmb_ApplyRotaryPosEmbAiCore_ApplyRotaryPosEmb", "ApplyRotaryPosEmb", _V, 15.0),
             ("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore", "FlashAttentionScore", _MIX, 300.0),
             MATMUL, ADD)
SWIGLU = ("aclnnSwiGlu_SwiGluAiCore_SwiGlu", "SwiGlu", "MIX_AIV", 40.0)
FFN = (RMSNORM, MATMUL, SWIGLU, MATMUL, ADD)
GMM = ("aclnnGroupedMatmul_GroupedMatmulAiCore_GroupedMatmul", "GroupedMatmul", _C, 200.0)
MOE = (RMSNORM, MATMUL,
       ("aclnnMoeGatingTopKSoftmax_MoeGatingTopKSoftmax_MoeGatingTopKSoftmax", "MoeGatingTopKSoftmax", _V, 12.0),
       ("aclnnMoeInitRoutingV2_MoeInitRoutingV2_MoeInitRoutingV2", "MoeInitRoutingV2", _V, 25.0),
       GMM, SWIGLU, GMM,
       ("aclnnMoeFinalizeRoutingV2_MoeFinalizeRoutingV2_MoeFinalizeRoutingV2", "MoeFinalizeRoutingV2", _V, 20.0),
       ADD)
DECOMPOSED_RMSNORM = (
    ("aclnnCast_CastAiCore_Cast", "Cast", _V, 4.0),
    ("aclnnPowTensorScalar_PowAiCore_Pow", "Pow", _V, 6.0),
    ("aclnnMean_ReduceMeanAiCore_ReduceMean", "ReduceMean", _V, 8.0),
    ("aclnnAdds_AddAiCore_Add", "Add", _V, 3.0),
    ("aclnnRsqrt_RsqrtAiCore_Rsqrt", "Rsqrt", _V, 3.0),
    ("aclnnMul_MulAiCore_Mul", "Mul", _V, 5.0),
    ("aclnnMul_MulAiCore_Mul", "Mul", _V, 5.0),
    ("aclnnCast_CastAiCore_Cast", "Cast", _V, 4.0),
)
HEAD = (("aclnnEmbedding_GatherV2AiCore_GatherV2", "GatherV2", _V, 30.0),)
ARGMAX = ("aclnnArgMax_ArgMaxV2AiCore_ArgMaxV2", "ArgMaxV2", _V, 20.0)


def transformer_sequence(layers: int, *, moe: bool = False, dense_layers: int = 0,
                         decomposed_rmsnorm: bool = False, companion_layers: tuple = ()) -> tuple:
    """The kernel sequence of one step (module doc). Layers whose 0-based index is in
    ``companion_layers`` have no attention block (companion layers: MLP / MoE block only).

    Raises:
        ValueError: ``layers`` < 1 or ``dense_layers`` > ``layers``.
    """
    if layers < 1 or dense_layers < 0 or dense_layers > layers:
        raise ValueError(f"need 1 <= layers and 0 <= dense_layers <= layers, got {layers}, {dense_layers}")
    seq = list(HEAD)
    for i in range(layers):
        seq += (() if i in companion_layers else ATTENTION) + (MOE if moe and i >= dense_layers else FFN)
    seq += list(DECOMPOSED_RMSNORM if decomposed_rmsnorm else (RMSNORM,)) + [MATMUL, ARGMAX]
    return tuple(seq)


def write_transformer(out_dir, layers: int, *, moe: bool = False, dense_layers: int = 0,
                      decomposed_rmsnorm: bool = False, companion_layers: tuple = (), **spec) -> Path:
    """Write a transformer-like capture (:func:`transformer_sequence` every step) under
    ``out_dir``. Communication (``comm_ops`` allreduces, default 2) is placed after the last
    compute kernel (``overlap`` 1.0) unless given; other ``spec`` fields go to
    :class:`SynthSpec`."""
    spec.setdefault("overlap", 1.0)
    seq = transformer_sequence(layers, moe=moe, dense_layers=dense_layers, decomposed_rmsnorm=decomposed_rmsnorm,
                               companion_layers=tuple(companion_layers))
    return write_capture(out_dir, SynthSpec(sequence=seq, **spec))
