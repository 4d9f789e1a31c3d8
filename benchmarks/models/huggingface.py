"""Hugging Face transformers models built from configs with random weights (no downloads).

Each builder has a small CPU size (also its `medium` one) and a realistic GPU size (ResNet-50,
ViT-B/16, ConvNeXt-T, GPT-2 small, BERT base, an 8-layer Llama-style decoder, T5-small).
Dropout is zero unless the build asks for it (benchmarks/models/regularization.py).
"""

from __future__ import annotations

from typing import Any

import torch

from benchmarks.models.regularization import regularize
from benchmarks.models.workload import KeywordAdapter, ModelSpec, Workload, prepare


def _config(dropout: bool, name: str, **fields: Any) -> Any:
    import transformers

    return regularize(getattr(transformers, name)(**fields), dropout)


def _build(model_class: str, config: Any) -> torch.nn.Module:
    import transformers

    config._attn_implementation = "sdpa" if _supports_sdpa(model_class) else "eager"
    return getattr(transformers, model_class)(config)


def _supports_sdpa(model_class: str) -> bool:
    import transformers

    return bool(getattr(getattr(transformers, model_class), "_supports_sdpa", False))


def _image_workload(
    model_class: str, config: Any, batch: int, image: int, mode: str, description: str
) -> Workload:
    model = _build(model_class, config)
    pixels = torch.randn(batch, 3, image, image)
    if mode == "inference":
        adapter = KeywordAdapter(model, ("pixel_values",), "logits")
        return Workload(prepare(adapter, mode), (pixels,), description)
    labels = torch.randint(0, config.num_labels, (batch,))
    adapter = KeywordAdapter(model, ("pixel_values", "labels"), "loss")
    return Workload(prepare(adapter, mode), (pixels, labels), description)


def _text_workload(
    model_class: str, config: Any, batch: int, length: int, mode: str, description: str
) -> Workload:
    model = _build(model_class, config)
    tokens = torch.randint(0, config.vocab_size, (batch, length))
    if mode == "inference":
        adapter = KeywordAdapter(model, ("input_ids",), "logits")
        return Workload(prepare(adapter, mode), (tokens,), description)
    labels = torch.randint(0, config.vocab_size, (batch, length))
    adapter = KeywordAdapter(model, ("input_ids", "labels"), "loss")
    return Workload(prepare(adapter, mode), (tokens, labels), description)


def build_resnet(size: str, mode: str, dropout: bool = False) -> Workload:
    if size != "gpu":
        config = _config(
            dropout,
            "ResNetConfig",
            embedding_size=16,
            hidden_sizes=[32, 64, 128, 256],
            depths=[1, 1, 1, 1],
            layer_type="bottleneck",
            num_labels=10,
        )
        return _image_workload("ResNetForImageClassification", config, 4, 64, mode, "ResNet tiny")
    config = _config(dropout, "ResNetConfig", num_labels=1000)  # the defaults are ResNet-50
    return _image_workload("ResNetForImageClassification", config, 32, 224, mode, "ResNet-50")


def build_vit(size: str, mode: str, dropout: bool = False) -> Workload:
    if size != "gpu":
        config = _config(
            dropout,
            "ViTConfig",
            image_size=32,
            patch_size=8,
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=256,
            num_labels=10,
        )
        return _image_workload("ViTForImageClassification", config, 4, 32, mode, "ViT tiny")
    config = _config(dropout, "ViTConfig", num_labels=1000)  # the defaults are ViT-B/16 at 224px
    return _image_workload("ViTForImageClassification", config, 32, 224, mode, "ViT-B/16")


def build_convnext(size: str, mode: str, dropout: bool = False) -> Workload:
    if size != "gpu":
        config = _config(
            dropout,
            "ConvNextConfig",
            hidden_sizes=[32, 64, 128, 256],
            depths=[1, 1, 1, 1],
            num_labels=10,
        )
        return _image_workload(
            "ConvNextForImageClassification", config, 4, 64, mode, "ConvNeXt tiny"
        )
    config = _config(dropout, "ConvNextConfig", num_labels=1000)  # the defaults are ConvNeXt-T
    return _image_workload("ConvNextForImageClassification", config, 32, 224, mode, "ConvNeXt-T")


def build_gpt2(size: str, mode: str, dropout: bool = False) -> Workload:
    if size != "gpu":
        config = _config(
            dropout,
            "GPT2Config",
            n_layer=2,
            n_embd=128,
            n_head=4,
            vocab_size=1024,
            n_positions=128,
            bos_token_id=0,
            eos_token_id=0,
        )
        return _text_workload("GPT2LMHeadModel", config, 2, 64, mode, "GPT-2 2x128")
    config = _config(dropout, "GPT2Config")  # the defaults are GPT-2 small (124M)
    return _text_workload("GPT2LMHeadModel", config, 8, 512, mode, "GPT-2 small")


def build_bert(size: str, mode: str, dropout: bool = False) -> Workload:
    if size != "gpu":
        config = _config(
            dropout,
            "BertConfig",
            num_hidden_layers=2,
            hidden_size=128,
            num_attention_heads=4,
            intermediate_size=256,
            vocab_size=1024,
        )
        return _text_workload("BertForMaskedLM", config, 2, 64, mode, "BERT 2x128")
    config = _config(dropout, "BertConfig")  # the defaults are BERT base
    return _text_workload("BertForMaskedLM", config, 16, 512, mode, "BERT base")


def build_llama(size: str, mode: str, dropout: bool = False) -> Workload:
    if size != "gpu":
        config = _config(
            dropout,
            "LlamaConfig",
            num_hidden_layers=2,
            hidden_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=256,
            vocab_size=1024,
            max_position_embeddings=128,
        )
        return _text_workload("LlamaForCausalLM", config, 2, 64, mode, "Llama-style 2x128, GQA")
    config = _config(
        dropout,
        "LlamaConfig",
        num_hidden_layers=8,
        hidden_size=1024,
        num_attention_heads=16,
        num_key_value_heads=4,
        intermediate_size=2816,
        vocab_size=32000,
        max_position_embeddings=2048,
    )
    return _text_workload("LlamaForCausalLM", config, 8, 1024, mode, "Llama-style 8x1024, GQA")


def build_t5(size: str, mode: str, dropout: bool = False) -> Workload:
    if size != "gpu":
        config = _config(
            dropout,
            "T5Config",
            d_model=128,
            d_kv=32,
            d_ff=256,
            num_layers=2,
            num_heads=4,
            vocab_size=1024,
            decoder_start_token_id=0,
        )
        batch, length, description = 2, 64, "T5-style 2x128"
    else:
        config = _config(dropout, "T5Config", decoder_start_token_id=0)  # the defaults are T5-small
        batch, length, description = 16, 256, "T5-small"
    model = _build("T5ForConditionalGeneration", config)
    tokens = torch.randint(0, config.vocab_size, (batch, length))
    decoder_tokens = torch.randint(0, config.vocab_size, (batch, length // 2))
    if mode == "inference":
        names = ("input_ids", "decoder_input_ids")
        adapter = KeywordAdapter(model, names, "logits")
        return Workload(prepare(adapter, mode), (tokens, decoder_tokens), description)
    adapter = KeywordAdapter(model, ("input_ids", "labels"), "loss")
    return Workload(prepare(adapter, mode), (tokens, decoder_tokens), description)


SPECS = (
    ModelSpec("hf_resnet", "huggingface", build_resnet, requires="transformers"),
    ModelSpec("hf_vit", "huggingface", build_vit, requires="transformers", dropout=True),
    ModelSpec("hf_convnext", "huggingface", build_convnext, requires="transformers", dropout=True),
    ModelSpec("hf_gpt2", "huggingface", build_gpt2, requires="transformers", dropout=True),
    ModelSpec("hf_bert", "huggingface", build_bert, requires="transformers", dropout=True),
    ModelSpec("hf_llama", "huggingface", build_llama, requires="transformers", dropout=True),
    ModelSpec("hf_t5", "huggingface", build_t5, requires="transformers", dropout=True),
)
