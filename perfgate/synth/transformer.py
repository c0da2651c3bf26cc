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


# -- training steps: micro-batches, pipeline stages, backward, recompute, MoE -----------------------
_HCCL = "HCCL"
ROPE = ("aclnnRotaryPositionEmbedding_RotaryPositionEmbedding_RotaryPositionEmbedding", "RotaryPositionEmbedding",
        _V, 30.0)
FA = ("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore", "FlashAttentionScore", _MIX, 880.0)
FA_GRAD = ("aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad_FlashAttentionScoreGrad",
           "FlashAttentionScoreGrad", _MIX, 2250.0)
ROPE_GRAD = ("RotaryPositionEmbeddingGrad", "RotaryPositionEmbeddingGrad", _V, 50.0)
RMSNORM_GRAD = ("RmsNormGrad", "RmsNormGrad", "MIX_AIV", 110.0)
SWIGLU_GRAD = ("SwiGluGrad", "SwiGluGrad", _V, 210.0)
CAST = ("aclnnCast_CastAiCore_Cast", "Cast", _V, 2.0)
# a Qwen3-style decoder layer (q/k norm): forward and its backward (reverse order)
QWEN_ATTENTION = (RMSNORM, MATMUL, RMSNORM, RMSNORM, ROPE, ROPE, FA, MATMUL, ADD)
QWEN_FFN = (RMSNORM, MATMUL, SWIGLU, MATMUL, ADD)
QWEN_FFN_GRAD = (MATMUL, MATMUL, SWIGLU_GRAD, MATMUL, MATMUL, ADD, RMSNORM_GRAD, CAST, ADD)
QWEN_ATTENTION_GRAD = (MATMUL, MATMUL, FA_GRAD, ROPE_GRAD, ROPE_GRAD, RMSNORM_GRAD, RMSNORM_GRAD, MATMUL, MATMUL,
                       ADD, RMSNORM_GRAD, CAST, ADD)
# DeepSeek-style MoE block: router, dispatch (alltoall), GroupedMatmul experts, combine (alltoall)
ALLTOALL = ("hcom_alltoAllV__", "hcom_alltoAllV_", _HCCL, 300.0)
MOE_DS = (RMSNORM, MATMUL,
          ("aclnnMoeGatingTopKSoftmax_MoeGatingTopKSoftmax_MoeGatingTopKSoftmax", "MoeGatingTopKSoftmax", _V, 12.0),
          ("aclnnMoeInitRoutingV2_MoeInitRoutingV2_MoeInitRoutingV2", "MoeInitRoutingV2", _V, 25.0),
          ALLTOALL, GMM, SWIGLU, GMM, ALLTOALL,
          ("aclnnMoeFinalizeRoutingV2_MoeFinalizeRoutingV2_MoeFinalizeRoutingV2", "MoeFinalizeRoutingV2", _V, 20.0),
          ADD)
MOE_DS_GRAD = (ALLTOALL,
               ("aclnnMoeFinalizeRoutingV2Grad_MoeFinalizeRoutingV2Grad_MoeFinalizeRoutingV2Grad",
                "MoeFinalizeRoutingV2Grad", _V, 30.0),
               GMM, GMM, SWIGLU_GRAD, GMM, GMM, ALLTOALL,
               ("aclnnMoeInitRoutingV2Grad_MoeInitRoutingV2Grad_MoeInitRoutingV2Grad", "MoeInitRoutingV2Grad", _V, 25.0),
               MATMUL, ADD, RMSNORM_GRAD, CAST, ADD)
PIPELINE = ("hcom_batchSendRecv__", "hcom_batchSendRecv_", _HCCL, 400.0)
EMBEDDING = (("aclnnEmbedding_GatherV2AiCore_GatherV2", "GatherV2", _V, 40.0), ("aclnnMuls_Muls_Muls", "Muls", _V, 10.0))
EMBEDDING_GRAD = (("aclnnEmbeddingDenseBackward_EmbeddingDenseGradV2_EmbeddingDenseGradV2", "EmbeddingDenseGradV2",
                   "MIX_AIV", 130.0), ("aclnnEmbeddingDenseBackward_CastAiCore_Cast", "Cast", _V, 20.0))
LOSS = (RMSNORM, MATMUL, ("aclnnCrossEntropyLoss_CrossEntropyLoss_CrossEntropyLoss", "CrossEntropyLoss", _V, 60.0),
        ("aclnnCrossEntropyLossGrad_CrossEntropyLossGrad_CrossEntropyLossGrad", "CrossEntropyLossGrad", _V, 60.0),
        MATMUL, MATMUL, RMSNORM_GRAD)
# Megatron's vocab-parallel cross entropy (``_VocabParallelCrossEntropy``): no kernel carries a loss
# name; the logits' max, the target logit and the exp sum are all-reduced over the tensor-parallel
# group, the loss averaged over the data-parallel group; then its backward (softmax minus one-hot,
# times the output gradient), the LM head's backward (input and weight gradients) and the final
# norm's gradient
ALLREDUCE = ("hcom_allReduce__", "hcom_allReduce_", _HCCL, 200.0)
VOCAB_PARALLEL_LOSS = (
    RMSNORM, MATMUL,
    ("aclnnMaxDim_ArgMaxWithValueAiCore_ArgMaxWithValue", "ArgMaxWithValue", _V, 300.0), ALLREDUCE,
    ("aclnnSub_SubAiCore_Sub", "Sub", _V, 300.0),
    ("aclnnGather_GatherElementsAiCore_GatherElements", "GatherElements", _V, 20.0), ALLREDUCE,
    ("aclnnExp_ExpAiCore_Exp", "Exp", _V, 300.0),
    ("aclnnReduceSum_ReduceSumOpAiCore_ReduceSum", "ReduceSum", _V, 100.0), ALLREDUCE,
    ("aclnnLog_LogAiCore_Log", "Log", _V, 5.0), ("aclnnSub_SubAiCore_Sub", "Sub", _V, 5.0),
    ("aclnnDiv_RealDivAiCore_RealDiv", "RealDiv", _V, 300.0),
    ("aclnnMul_MulAiCore_Mul", "Mul", _V, 5.0), ("aclnnReduceSum_ReduceSumOpAiCore_ReduceSum", "ReduceSum", _V, 5.0),
    ("hcom_allReduce__", "hcom_allReduce_", _HCCL, 6500.0),
    ("aclnnIndexPutImpl_IndexPutV2AiCore_IndexPutV2", "IndexPutV2", _V, 30.0),
    ("aclnnMul_MulAiCore_Mul", "Mul", _V, 300.0),
    MATMUL, MATMUL, RMSNORM_GRAD)
GRAD_SYNC = (("hcom_reduceScatter__", "hcom_reduceScatter_", _HCCL, 2000.0),
             ("hcom_allGather__", "hcom_allGather_", _HCCL, 1500.0))
OPTIMIZER = (("aclnnApplyAdamWV2_ApplyAdamWV2_ApplyAdamWV2", "ApplyAdamWV2", _V, 150.0),) * 4


def training_sequence(layers: int, *, microbatches: int = 2, stage: int = 0, stages: int = 2,
                      recompute: bool = False, moe: bool = False, dense_layers: int = 0, loss: tuple = LOSS) -> tuple:
    """One training step of one pipeline stage (1F1B schedule), kernels in execution order.

    Per micro-batch the forward runs ``layers`` decoder layers (Qwen3-style attention with
    q/k norm + SwiGlu FFN; with ``moe`` a DeepSeek-style MoE block — router, alltoall dispatch,
    GroupedMatmul experts, alltoall combine — in every layer after the first ``dense_layers``),
    the backward runs them in reverse. Stage 0 starts each forward with the embedding and ends
    each backward with its gradient; the last stage runs final norm + LM head + loss and their
    backward between a micro-batch's forward and backward; every stage change is a pipeline
    send/recv (``hcom_batchSendRecv``). With ``recompute=True`` each backward first re-runs the
    forward of all layers (activation checkpointing, one block); with ``recompute="layer"`` each
    layer's forward is re-run right before its backward (per-layer checkpointing). ``loss``: the last
    stage's final norm, LM head, loss and their backward (:data:`LOSS`, a fused cross entropy;
    :data:`VOCAB_PARALLEL_LOSS`, Megatron's vocab-parallel one with its all-reduces). The step ends with the
    gradient reduce-scatter / all-gather and the optimizer. Entries are ``(name, OP type,
    core type, mean duration us)``; ``HCCL`` entries are communication tasks.

    Raises:
        ValueError: layers < 1, microbatches < 1, stage outside 0..stages-1, dense_layers > layers.
    """
    if layers < 1 or microbatches < 1 or not 0 <= stage < stages or not 0 <= dense_layers <= layers:
        raise ValueError(f"need layers >= 1, microbatches >= 1, 0 <= stage < stages, 0 <= dense_layers <= layers; "
                         f"got {layers}, {microbatches}, {stage}/{stages}, {dense_layers}")
    first, last = stage == 0, stage == stages - 1
    fwd_layers = [QWEN_ATTENTION + (MOE_DS if moe and i >= dense_layers else QWEN_FFN) for i in range(layers)]
    bwd_layers = [(MOE_DS_GRAD if moe and i >= dense_layers else QWEN_FFN_GRAD) + QWEN_ATTENTION_GRAD
                  for i in reversed(range(layers))]

    def fwd():
        out = list(EMBEDDING) if first else [PIPELINE]
        out += [k for layer in fwd_layers for k in layer]
        out += list(loss) if last else [PIPELINE]
        return out

    def bwd():
        out = [] if last else [PIPELINE]
        if recompute == "layer":        # per-layer checkpointing: R_n B_n R_n-1 B_n-1 ...
            for f, b in zip(reversed(fwd_layers), bwd_layers):
                out += list(f) + list(b)
        else:
            if recompute:
                out += [k for layer in fwd_layers for k in layer]
            out += [k for layer in bwd_layers for k in layer]
        out += list(EMBEDDING_GRAD) if first else [PIPELINE]
        return out

    warm = min(stages - 1 - stage, microbatches)
    order = ["F"] * warm
    for i in range(microbatches - warm):
        order += ["F", "B"]
    order += ["B"] * warm
    seq = []
    for x in order:
        seq += fwd() if x == "F" else bwd()
    seq += list(GRAD_SYNC) + list(OPTIMIZER)
    return tuple(seq)


def write_training(out_dir, layers: int, *, microbatches: int = 2, stage: int = 0, stages: int = 2,
                   recompute: bool = False, moe: bool = False, dense_layers: int = 0, loss: tuple = LOSS,
                   **spec) -> Path:
    """Write a training capture (:func:`training_sequence` every step; no extra allreduces
    unless ``comm_ops`` is given); other ``spec`` fields go to :class:`SynthSpec`."""
    spec.setdefault("comm_ops", 0)
    spec.setdefault("overlap", 1.0)
    seq = training_sequence(layers, microbatches=microbatches, stage=stage, stages=stages, recompute=recompute,
                            moe=moe, dense_layers=dense_layers, loss=loss)
    return write_capture(out_dir, SynthSpec(sequence=seq, **spec))
