"""The broad transformers zoo: 49 architectures built from configs with random weights.

A table, one row a model: the model class, its config class, the input kind (masked or causal
language model, encoder-decoder, image classifier, LayoutLM with boxes) and the config fields
at a given size. Sizes: `small` (CPU, CI: width 64, seq 32, batch 2, images 64 px) and
`medium` (the GPU correctness suite: realistic widths and resolutions, two layers or one block
per stage, small batches; `gpu` is the same). Dropout is off unless the build asks for it;
then every dropout probability in the config is 0.1 and so is the stochastic-depth rate.
Left out: DeBERTa v1 and FNet, whose eager forward fails under bf16 autocast on CUDA
(DeBERTa v1 fills a bf16 tensor with float32's minimum; cuFFT has no bf16), so neither could
be judged against eager.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.models.regularization import regularize
from benchmarks.models.workload import KeywordAdapter, ModelSpec, Workload, prepare

LABELS = 10  # classes of the image classifiers


@dataclass(frozen=True)
class Dims:
    """The sizes a row's config fields and inputs are written in."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq: int
    batch: int
    image: int
    image_batch: int


SIZE_DIMS = {
    "small": Dims(64, 2, 4, 2, 128, 512, 32, 2, 64, 2),
    "medium": Dims(256, 2, 4, 2, 1024, 8192, 128, 4, 224, 4),
}


def dims(size: str) -> Dims:
    """The dims of `size`; `gpu` is `medium` (the zoo has no separate full size)."""
    return SIZE_DIMS["medium" if size == "gpu" else size]


Fields = Callable[[Dims], dict[str, Any]]


@dataclass(frozen=True)
class Row:
    """One zoo model: what to build, with which inputs, configured how at a size."""

    name: str
    model_class: str
    config_class: str
    kind: str  # "masked-lm", "causal-lm", "seq2seq", "image", "layoutlm"
    fields: Fields
    description: str
    image_size: Callable[[Dims], int] | None = None  # input pixels, when not dims.image
    dropout: bool = True  # the config has a dropout or stochastic-depth probability


def bert_fields(d: Dims) -> dict[str, Any]:
    return {
        "hidden_size": d.hidden,
        "num_hidden_layers": d.layers,
        "num_attention_heads": d.heads,
        "intermediate_size": d.ffn,
        "vocab_size": d.vocab,
        "max_position_embeddings": max(512, d.seq),
    }


def llama_fields(d: Dims) -> dict[str, Any]:
    return {
        **bert_fields(d),
        "num_key_value_heads": d.kv_heads,
        "head_dim": d.hidden // d.heads,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def gpt_fields(d: Dims) -> dict[str, Any]:
    return {
        "n_embd": d.hidden,
        "n_layer": d.layers,
        "n_head": d.heads,
        "n_inner": d.ffn,
        "vocab_size": d.vocab,
        "n_positions": max(512, d.seq),
        "bos_token_id": 1,
        "eos_token_id": 2,
    }


def bart_fields(d: Dims) -> dict[str, Any]:
    return {
        "d_model": d.hidden,
        "encoder_layers": d.layers,
        "decoder_layers": d.layers,
        "encoder_attention_heads": d.heads,
        "decoder_attention_heads": d.heads,
        "encoder_ffn_dim": d.ffn,
        "decoder_ffn_dim": d.ffn,
        "vocab_size": d.vocab,
        "max_position_embeddings": max(512, d.seq),
        "pad_token_id": 1,
        "bos_token_id": 0,
        "eos_token_id": 2,
        "decoder_start_token_id": 2,
        "forced_eos_token_id": 2,
    }


def _stages(d: Dims, medium: list[int], small: list[int]) -> list[int]:
    return small if d.hidden <= 64 else medium


ROWS = (
    # encoders (masked language models)
    Row("hf_roberta", "RobertaForMaskedLM", "RobertaConfig", "masked-lm",
        lambda d: {**bert_fields(d), "pad_token_id": 1}, "RoBERTa"),
    Row("hf_albert", "AlbertForMaskedLM", "AlbertConfig", "masked-lm",
        lambda d: {**bert_fields(d), "embedding_size": d.hidden // 2, "num_hidden_layers": 4},
        "ALBERT, one layer shared 4 times"),
    Row("hf_distilbert", "DistilBertForMaskedLM", "DistilBertConfig", "masked-lm",
        lambda d: {"dim": d.hidden, "n_layers": d.layers, "n_heads": d.heads,
                   "hidden_dim": d.ffn, "vocab_size": d.vocab}, "DistilBERT"),
    Row("hf_electra", "ElectraForMaskedLM", "ElectraConfig", "masked-lm",
        lambda d: {**bert_fields(d), "embedding_size": d.hidden // 2}, "ELECTRA generator"),
    Row("hf_deberta_v2", "DebertaV2ForMaskedLM", "DebertaV2Config", "masked-lm",
        lambda d: {**bert_fields(d), "relative_attention": True, "position_buckets": 64,
                   "pos_att_type": ["p2c", "c2p"], "position_biased_input": False,
                   "norm_rel_ebd": "layer_norm", "share_att_key": True,
                   "max_relative_positions": -1}, "DeBERTa-v3 style (relative attention)"),
    Row("hf_layoutlm", "LayoutLMForMaskedLM", "LayoutLMConfig", "layoutlm",
        bert_fields, "LayoutLM (2-D box embeddings)"),
    Row("hf_mpnet", "MPNetForMaskedLM", "MPNetConfig", "masked-lm",
        lambda d: {**bert_fields(d), "pad_token_id": 1}, "MPNet (relative position buckets)"),
    Row("hf_convbert", "ConvBertForMaskedLM", "ConvBertConfig", "masked-lm",
        lambda d: {**bert_fields(d), "embedding_size": d.hidden},
        "ConvBERT (span-based dynamic convolution)"),
    Row("hf_roformer", "RoFormerForMaskedLM", "RoFormerConfig", "masked-lm",
        lambda d: {**bert_fields(d), "embedding_size": d.hidden}, "RoFormer (rotary)"),
    Row("hf_mobilebert", "MobileBertForMaskedLM", "MobileBertConfig", "masked-lm",
        lambda d: {**bert_fields(d), "embedding_size": d.hidden // 2,
                   "intra_bottleneck_size": d.hidden // 2, "true_hidden_size": d.hidden // 2,
                   "intermediate_size": d.hidden // 2}, "MobileBERT (bottlenecks, NoNorm)"),
    Row("hf_funnel", "FunnelForMaskedLM", "FunnelConfig", "masked-lm",
        lambda d: {"d_model": d.hidden, "n_head": d.heads, "d_head": d.hidden // d.heads,
                   "d_inner": d.ffn, "vocab_size": d.vocab, "block_sizes": [1, 1],
                   "num_decoder_layers": 1}, "Funnel Transformer (pooled blocks)"),
    Row("hf_esm", "EsmForMaskedLM", "EsmConfig", "masked-lm",
        lambda d: {**bert_fields(d), "vocab_size": 33, "pad_token_id": 1, "mask_token_id": 32,
                   "position_embedding_type": "rotary", "emb_layer_norm_before": False},
        "ESM-2 style protein LM (rotary)"),
    Row("hf_nystromformer", "NystromformerForMaskedLM", "NystromformerConfig", "masked-lm",
        lambda d: {**bert_fields(d), "num_landmarks": d.seq // 4,
                   "segment_means_seq_len": d.seq, "conv_kernel_size": 33},
        "Nystromformer (landmarks, depthwise conv)"),
    Row("hf_squeezebert", "SqueezeBertForMaskedLM", "SqueezeBertConfig", "masked-lm",
        lambda d: {**bert_fields(d), "embedding_size": d.hidden},
        "SqueezeBERT (grouped 1-d convolutions)"),
    # decoders (causal language models)
    Row("hf_opt", "OPTForCausalLM", "OPTConfig", "causal-lm",
        lambda d: {"hidden_size": d.hidden, "num_hidden_layers": d.layers, "ffn_dim": d.ffn,
                   "num_attention_heads": d.heads, "word_embed_proj_dim": d.hidden,
                   "vocab_size": d.vocab, "max_position_embeddings": max(512, d.seq),
                   "pad_token_id": 1}, "OPT"),
    Row("hf_gpt_neo", "GPTNeoForCausalLM", "GPTNeoConfig", "causal-lm",
        lambda d: {"hidden_size": d.hidden, "num_layers": d.layers, "num_heads": d.heads,
                   "intermediate_size": d.ffn, "vocab_size": d.vocab,
                   "attention_types": [[["global", "local"], d.layers // 2]],
                   "window_size": d.seq // 4, "max_position_embeddings": max(512, d.seq),
                   "bos_token_id": 1, "eos_token_id": 2},
        "GPT-Neo (global and local attention)"),
    Row("hf_gpt_neox", "GPTNeoXForCausalLM", "GPTNeoXConfig", "causal-lm",
        lambda d: {**bert_fields(d), "rotary_pct": 0.25}, "GPT-NeoX (partial rotary, parallel)"),
    Row("hf_gptj", "GPTJForCausalLM", "GPTJConfig", "causal-lm",
        lambda d: {**gpt_fields(d), "rotary_dim": d.hidden // d.heads // 2},
        "GPT-J (interleaved rotary)"),
    Row("hf_bloom", "BloomForCausalLM", "BloomConfig", "causal-lm",
        lambda d: {"hidden_size": d.hidden, "n_layer": d.layers, "n_head": d.heads,
                   "vocab_size": d.vocab}, "BLOOM (ALiBi)"),
    Row("hf_mistral", "MistralForCausalLM", "MistralConfig", "causal-lm",
        lambda d: {**llama_fields(d), "sliding_window": d.seq // 2},
        "Mistral (GQA, rotary, sliding window)"),
    Row("hf_qwen2", "Qwen2ForCausalLM", "Qwen2Config", "causal-lm",
        llama_fields, "Qwen2 (GQA, rotary, qkv bias)"),
    Row("hf_qwen3", "Qwen3ForCausalLM", "Qwen3Config", "causal-lm",
        llama_fields, "Qwen3 (GQA, rotary, q/k norm)"),
    Row("hf_gemma", "GemmaForCausalLM", "GemmaConfig", "causal-lm",
        lambda d: {**llama_fields(d), "num_key_value_heads": 1}, "Gemma (MQA, GeGLU)"),
    Row("hf_gemma2", "Gemma2ForCausalLM", "Gemma2Config", "causal-lm",
        lambda d: {**llama_fields(d), "sliding_window": d.seq // 2,
                   "query_pre_attn_scalar": d.hidden // d.heads},
        "Gemma2 (softcapping, alternating sliding window)"),
    Row("hf_phi", "PhiForCausalLM", "PhiConfig", "causal-lm",
        llama_fields, "Phi (partial rotary, parallel block)"),
    Row("hf_phi3", "Phi3ForCausalLM", "Phi3Config", "causal-lm",
        llama_fields, "Phi-3 (fused qkv and gate-up)"),
    Row("hf_falcon", "FalconForCausalLM", "FalconConfig", "causal-lm",
        lambda d: {"hidden_size": d.hidden, "num_hidden_layers": d.layers,
                   "num_attention_heads": d.heads, "vocab_size": d.vocab,
                   "ffn_hidden_size": d.ffn}, "Falcon (multi-query, parallel attention)"),
    Row("hf_gpt_bigcode", "GPTBigCodeForCausalLM", "GPTBigCodeConfig", "causal-lm",
        gpt_fields, "GPT-BigCode (multi-query)"),
    Row("hf_codegen", "CodeGenForCausalLM", "CodeGenConfig", "causal-lm",
        lambda d: {**gpt_fields(d), "n_ctx": max(512, d.seq),
                   "rotary_dim": d.hidden // d.heads // 2}, "CodeGen (rotary)"),
    # encoder-decoders
    Row("hf_bart", "BartForConditionalGeneration", "BartConfig", "seq2seq",
        bart_fields, "BART"),
    Row("hf_mbart", "MBartForConditionalGeneration", "MBartConfig", "seq2seq",
        bart_fields, "mBART (pre-norm)"),
    Row("hf_pegasus", "PegasusForConditionalGeneration", "PegasusConfig", "seq2seq",
        lambda d: {**bart_fields(d), "pad_token_id": 0, "decoder_start_token_id": 0,
                   "eos_token_id": 1, "forced_eos_token_id": 1},
        "Pegasus (sinusoidal positions)"),
    Row("hf_marian", "MarianMTModel", "MarianConfig", "seq2seq",
        lambda d: {**bart_fields(d), "decoder_vocab_size": d.vocab,
                   "pad_token_id": d.vocab - 1, "decoder_start_token_id": d.vocab - 1,
                   "eos_token_id": 0, "forced_eos_token_id": 0}, "Marian"),
    # image classifiers
    Row("hf_efficientnet", "EfficientNetForImageClassification", "EfficientNetConfig", "image",
        lambda d: {"image_size": d.image, "width_coefficient": 1.0 if d.image > 64 else 0.25,
                   "depth_coefficient": 1.0 if d.image > 64 else 0.34,
                   "hidden_dim": 1280 if d.image > 64 else 320}, "EfficientNet-B0 (depthwise, squeeze-excite)"),
    Row("hf_swin", "SwinForImageClassification", "SwinConfig", "image",
        lambda d: {"image_size": max(d.image, 128), "embed_dim": 96 if d.image > 64 else 32,
                   "depths": [1, 1, 2, 1], "num_heads": [3, 6, 12, 24] if d.image > 64
                   else [1, 2, 4, 8], "window_size": 7 if d.image > 64 else 4},
        "Swin (shifted windows)", image_size=lambda d: max(d.image, 128)),
    Row("hf_swinv2", "Swinv2ForImageClassification", "Swinv2Config", "image",
        lambda d: {"image_size": d.image, "embed_dim": 96 if d.image > 64 else 32,
                   "depths": [1, 1, 2, 1], "num_heads": [3, 6, 12, 24] if d.image > 64
                   else [1, 2, 4, 8]}, "Swin V2 (cosine attention, log-spaced CPB)"),
    Row("hf_deit", "DeiTForImageClassification", "DeiTConfig", "image",
        lambda d: {**bert_fields(d), "image_size": d.image, "patch_size": 16 if
                   d.image > 64 else 8}, "DeiT"),
    Row("hf_beit", "BeitForImageClassification", "BeitConfig", "image",
        lambda d: {**bert_fields(d), "image_size": d.image, "patch_size": 16 if
                   d.image > 64 else 8, "use_relative_position_bias": True,
                   "use_mean_pooling": True, "layer_scale_init_value": 0.1},
        "BEiT (relative position bias, layer scale)"),
    Row("hf_dinov2", "Dinov2ForImageClassification", "Dinov2Config", "image",
        lambda d: {**bert_fields(d), "image_size": d.image, "patch_size": 14 if
                   d.image > 64 else 8, "mlp_ratio": 4}, "DINOv2 (layer scale)"),
    Row("hf_mobilenet_v2", "MobileNetV2ForImageClassification", "MobileNetV2Config", "image",
        lambda d: {"image_size": d.image, "depth_multiplier": 1.0 if d.image > 64 else 0.35},
        "MobileNetV2 (depthwise, inverted residuals)"),
    Row("hf_regnet", "RegNetForImageClassification", "RegNetConfig", "image",
        lambda d: {"hidden_sizes": [48, 104, 208, 440], "depths": [1, 1, 2, 1],
                   "groups_width": 8}, "RegNetY (grouped convs, squeeze-excite)", dropout=False),
    Row("hf_levit", "LevitForImageClassification", "LevitConfig", "image",
        lambda d: {"image_size": d.image, "depths": [1, 1, 1]},
        "LeViT (attention biases by index)", dropout=False),
    Row("hf_poolformer", "PoolFormerForImageClassification", "PoolFormerConfig", "image",
        lambda d: {"depths": [1, 1, 1, 1]}, "PoolFormer (pooling mixer, layer scale)"),
    Row("hf_convnextv2", "ConvNextV2ForImageClassification", "ConvNextV2Config", "image",
        lambda d: {"hidden_sizes": [40, 80, 160, 320], "depths": [1, 1, 2, 1]},
        "ConvNeXt V2 atto-style (GRN)"),
    Row("hf_cvt", "CvtForImageClassification", "CvtConfig", "image",
        lambda d: {"depth": [1, 2, 3]}, "CvT (convolutional projections)"),
    Row("hf_mobilevit", "MobileViTForImageClassification", "MobileViTConfig", "image",
        lambda d: {"image_size": d.image}, "MobileViT-S", image_size=lambda d: d.image + 32),
    Row("hf_bit", "BitForImageClassification", "BitConfig", "image",
        lambda d: {"depths": [1, 1, 1, 1], "hidden_sizes": [128, 256, 512, 1024]},
        "BiT (weight-standardized convs, group norm)"),
    Row("hf_focalnet", "FocalNetForImageClassification", "FocalNetConfig", "image",
        lambda d: {"image_size": d.image, "depths": [1, 1, 2, 1]},
        "FocalNet (focal modulation)"),
    Row("hf_segformer", "SegformerForImageClassification", "SegformerConfig", "image",
        lambda d: {"depths": [1, 1, 1, 1]}, "SegFormer MiT-b0 (efficient attention, Mix-FFN)"),
)  # fmt: skip


def _config(row: Row, d: Dims, dropout: bool) -> Any:
    import transformers

    config = getattr(transformers, row.config_class)(**row.fields(d))
    if row.kind == "image":
        config.num_labels = LABELS
    return regularize(config, dropout)


def _model(row: Row, config: Any) -> torch.nn.Module:
    import transformers

    model_class = getattr(transformers, row.model_class)
    sdpa = bool(getattr(model_class, "_supports_sdpa", False))
    config._attn_implementation = "sdpa" if sdpa else "eager"
    return model_class(config)


def _boxes(batch: int, length: int) -> torch.Tensor:
    """Valid LayoutLM boxes (x0 <= x1, y0 <= y1, all below 1000)."""
    corners = torch.randint(0, 900, (batch, length, 2))
    extent = torch.randint(1, 100, (batch, length, 2))
    return torch.cat([corners, corners + extent], dim=-1)


def build_row(row: Row, size: str, mode: str, dropout: bool) -> Workload:
    """The workload of one zoo row: inputs on CPU, module in eval or train mode."""
    d = dims(size)
    config = _config(row, d, dropout)
    model = _model(row, config)
    if row.kind == "image":
        image = row.image_size(d) if row.image_size else d.image
        pixels = torch.randn(d.image_batch, 3, image, image)
        description = f"{row.description}, {image} px, batch {d.image_batch}"
        if mode == "inference":
            adapter = KeywordAdapter(model, ("pixel_values",), "logits")
            return Workload(prepare(adapter, mode), (pixels,), description)
        labels = torch.randint(0, LABELS, (d.image_batch,))
        adapter = KeywordAdapter(model, ("pixel_values", "labels"), "loss")
        return Workload(prepare(adapter, mode), (pixels, labels), description)
    vocab = int(config.vocab_size)
    tokens = torch.randint(3, vocab, (d.batch, d.seq))  # 0-2: pad, bos, eos in most configs
    description = f"{row.description}, {d.layers}x{d.hidden}, seq {d.seq}, batch {d.batch}"
    names: tuple[str, ...] = ("input_ids",)
    inputs: tuple[torch.Tensor, ...] = (tokens,)
    if row.kind == "layoutlm":
        names, inputs = ("input_ids", "bbox"), (tokens, _boxes(d.batch, d.seq))
    if row.kind == "seq2seq":
        target = torch.randint(3, vocab - 1, (d.batch, d.seq // 2))
        if mode == "inference":
            names, inputs = ("input_ids", "decoder_input_ids"), (tokens, target)
        else:
            names, inputs = ("input_ids", "labels"), (tokens, target)
        output = "logits" if mode == "inference" else "loss"
        return Workload(prepare(KeywordAdapter(model, names, output), mode), inputs, description)
    if mode == "inference":
        return Workload(prepare(KeywordAdapter(model, names, "logits"), mode), inputs, description)
    labels = torch.randint(0, vocab, (d.batch, d.seq))
    adapter = KeywordAdapter(model, (*names, "labels"), "loss")
    return Workload(prepare(adapter, mode), (*inputs, labels), description)


def _builder(row: Row) -> Callable[[str, str, bool], Workload]:
    def build(size: str, mode: str, dropout: bool) -> Workload:
        return build_row(row, size, mode, dropout)

    return build


SPECS = tuple(
    ModelSpec(row.name, "huggingface", _builder(row), requires="transformers", dropout=row.dropout)
    for row in ROWS
)
