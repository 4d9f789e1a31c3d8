"""Capture fidelity: ember's graphs and graph breaks next to torch.compile's (Dynamo's) on real
models, for inference and a training step, plus `fullgraph=True` and per-call guard cost.

    python -m benchmarks.capture_fidelity [--models gpt2,bert] [--modes inference,training]
        [--no-fullgraph] [--guards] [--json OUT.json] [--reasons]

Models are transformers models built from small configs with random weights and timm models
(`pretrained=False`), all on the CPU. For each model and mode, `ember.explain` and
`torch._dynamo.explain` run the same function (both with their `eager` backends: this measures
capture, not code generation):

- inference: `model(**inputs)` under `torch.no_grad()`, the model in eval mode;
- training: `step(**inputs)` = forward, a loss (transformers' own, from `labels`, or
  cross-entropy on the logits), and `loss.backward()`, the model in train mode without dropout.

`--guards` times one cache entry's guard check per call (ember's generated check, Dynamo's
guard manager) on the inference function. timm only imports where it is installed
(`/work/venv-timm` here); its models are skipped, saying so, elsewhere.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for source in (
    "src",
    "packages/prims/src",
    "packages/capture/src",
    "packages/autodiff/src",
    "packages/inductor/src",
    "packages/runtime/src",
):
    if str(ROOT / source) not in sys.path:
        sys.path.append(str(ROOT / source))

import torch  # noqa: E402
from torch import nn  # noqa: E402

Inputs = dict[str, Any]


@dataclass(frozen=True)
class ModelCase:
    """One benchmark model: how to build it and its inputs (batch 2, short sequences)."""

    name: str
    family: str  # "transformers" or "timm"
    build: Callable[[], tuple[nn.Module, Inputs, Inputs]]  # model, inputs, training extras


@dataclass
class CaptureCount:
    """What one capturer saw on one model and mode."""

    graphs: int = 0
    breaks: int = 0
    reasons: list[str] = field(default_factory=list)
    error: str | None = None
    fullgraph: str | None = None  # "ok", or the error's first line
    seconds: float = 0.0


@dataclass
class Row:
    model: str
    family: str
    mode: str
    ember: CaptureCount
    dynamo: CaptureCount


# ---------------------------------------------------------------------------------------------
# transformers models from small configs


def _text_inputs(vocab: int = 96, length: int = 8) -> Inputs:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, vocab, (2, length), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _decoder_only(
    config_name: str, **config: Any
) -> Callable[[], tuple[nn.Module, Inputs, Inputs]]:
    def build() -> tuple[nn.Module, Inputs, Inputs]:
        import transformers

        cfg = getattr(transformers, config_name)(**config)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
        inputs = _text_inputs()
        return model, inputs, {"labels": inputs["input_ids"]}

    return build


def _encoder(config_name: str, **config: Any) -> Callable[[], tuple[nn.Module, Inputs, Inputs]]:
    def build() -> tuple[nn.Module, Inputs, Inputs]:
        import transformers

        cfg = getattr(transformers, config_name)(num_labels=3, **config)
        model = transformers.AutoModelForSequenceClassification.from_config(cfg)
        return model, _text_inputs(), {"labels": torch.tensor([0, 2])}

    return build


def _seq2seq(config_name: str, **config: Any) -> Callable[[], tuple[nn.Module, Inputs, Inputs]]:
    def build() -> tuple[nn.Module, Inputs, Inputs]:
        import transformers

        cfg = getattr(transformers, config_name)(**config)
        model = transformers.AutoModelForSeq2SeqLM.from_config(cfg)
        inputs = _text_inputs()
        labels = _text_inputs(length=6)["input_ids"]
        decoder = {"decoder_input_ids": labels}
        return model, {**inputs, **decoder}, {"labels": labels}

    return build


def _vision(
    config_name: str, size: int = 32, model_class: str = "", **config: Any
) -> Callable[[], tuple[nn.Module, Inputs, Inputs]]:
    def build() -> tuple[nn.Module, Inputs, Inputs]:
        import transformers

        cfg = getattr(transformers, config_name)(num_labels=3, **config)
        if model_class:
            model = getattr(transformers, model_class)(cfg)
        else:
            model = transformers.AutoModelForImageClassification.from_config(cfg)
        pixels = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
        return model, {"pixel_values": pixels}, {"labels": torch.tensor([0, 2])}

    return build


_BERTLIKE = dict(
    vocab_size=96,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)
_LLAMALIKE = dict(
    vocab_size=96,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=64,
    max_position_embeddings=64,
)
_BARTLIKE = dict(
    vocab_size=96,
    d_model=32,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    dropout=0.0,
    attention_dropout=0.0,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
)
_VIT = dict(
    image_size=32,
    patch_size=8,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)

TRANSFORMERS_CASES: list[ModelCase] = [
    ModelCase(
        "gpt2",
        "transformers",
        _decoder_only(
            "GPT2Config",
            n_layer=2,
            n_head=2,
            n_embd=32,
            vocab_size=96,
            n_positions=64,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        ),
    ),
    ModelCase("bert", "transformers", _encoder("BertConfig", **_BERTLIKE)),
    ModelCase(
        "distilbert",
        "transformers",
        _encoder(
            "DistilBertConfig",
            vocab_size=96,
            dim=32,
            n_layers=2,
            n_heads=2,
            hidden_dim=64,
            max_position_embeddings=64,
            dropout=0.0,
            attention_dropout=0.0,
        ),
    ),
    ModelCase("roberta", "transformers", _encoder("RobertaConfig", **_BERTLIKE, pad_token_id=1)),
    ModelCase("albert", "transformers", _encoder("AlbertConfig", **_BERTLIKE, embedding_size=16)),
    ModelCase("electra", "transformers", _encoder("ElectraConfig", **_BERTLIKE, embedding_size=16)),
    ModelCase(
        "xlm_roberta", "transformers", _encoder("XLMRobertaConfig", **_BERTLIKE, pad_token_id=1)
    ),
    ModelCase("llama", "transformers", _decoder_only("LlamaConfig", **_LLAMALIKE)),
    ModelCase("mistral", "transformers", _decoder_only("MistralConfig", **_LLAMALIKE)),
    ModelCase("qwen2", "transformers", _decoder_only("Qwen2Config", **_LLAMALIKE)),
    ModelCase("qwen3", "transformers", _decoder_only("Qwen3Config", **_LLAMALIKE, head_dim=8)),
    ModelCase("gemma", "transformers", _decoder_only("GemmaConfig", **_LLAMALIKE, head_dim=8)),
    ModelCase("gemma2", "transformers", _decoder_only("Gemma2Config", **_LLAMALIKE, head_dim=8)),
    ModelCase("phi", "transformers", _decoder_only("PhiConfig", **_LLAMALIKE)),
    ModelCase("phi3", "transformers", _decoder_only("Phi3Config", **_LLAMALIKE, pad_token_id=0)),
    ModelCase("stablelm", "transformers", _decoder_only("StableLmConfig", **_LLAMALIKE)),
    ModelCase(
        "opt",
        "transformers",
        _decoder_only(
            "OPTConfig",
            vocab_size=96,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            ffn_dim=64,
            word_embed_proj_dim=32,
            max_position_embeddings=64,
            dropout=0.0,
            pad_token_id=1,
        ),
    ),
    ModelCase(
        "gpt_neo",
        "transformers",
        _decoder_only(
            "GPTNeoConfig",
            vocab_size=96,
            hidden_size=32,
            num_layers=2,
            num_heads=2,
            attention_types=[[["global", "local"], 1]],
            intermediate_size=64,
            max_position_embeddings=64,
            window_size=4,
            embed_dropout=0.0,
            attention_dropout=0.0,
            resid_dropout=0.0,
        ),
    ),
    ModelCase(
        "gptj",
        "transformers",
        _decoder_only(
            "GPTJConfig",
            vocab_size=96,
            n_embd=32,
            n_layer=2,
            n_head=2,
            rotary_dim=8,
            n_positions=64,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
        ),
    ),
    ModelCase(
        "bloom",
        "transformers",
        _decoder_only("BloomConfig", vocab_size=96, hidden_size=32, n_layer=2, n_head=2),
    ),
    ModelCase(
        "falcon",
        "transformers",
        _decoder_only(
            "FalconConfig",
            vocab_size=96,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            new_decoder_architecture=False,
            multi_query=True,
            alibi=False,
            hidden_dropout=0.0,
            attention_dropout=0.0,
        ),
    ),
    ModelCase(
        "t5",
        "transformers",
        _seq2seq(
            "T5Config",
            vocab_size=96,
            d_model=32,
            d_kv=16,
            d_ff=64,
            num_layers=2,
            num_decoder_layers=2,
            num_heads=2,
            dropout_rate=0.0,
            decoder_start_token_id=0,
        ),
    ),
    ModelCase("bart", "transformers", _seq2seq("BartConfig", **_BARTLIKE)),
    ModelCase("mbart", "transformers", _seq2seq("MBartConfig", **_BARTLIKE)),
    ModelCase("pegasus", "transformers", _seq2seq("PegasusConfig", **_BARTLIKE)),
    ModelCase("marian", "transformers", _seq2seq("MarianConfig", **_BARTLIKE)),
    ModelCase("vit", "transformers", _vision("ViTConfig", **_VIT)),
    ModelCase(
        "deit",
        "transformers",
        _vision("DeiTConfig", model_class="DeiTForImageClassification", **_VIT),
    ),
    ModelCase(
        "swin",
        "transformers",
        _vision(
            "SwinConfig",
            image_size=32,
            patch_size=4,
            embed_dim=16,
            depths=[1, 1],
            num_heads=[2, 2],
            window_size=4,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
            drop_path_rate=0.0,
        ),
    ),
    ModelCase(
        "convnext",
        "transformers",
        _vision(
            "ConvNextConfig", num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], drop_path_rate=0.0
        ),
    ),
    ModelCase(
        "resnet",
        "transformers",
        _vision("ResNetConfig", embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1]),
    ),
]


# ---------------------------------------------------------------------------------------------
# timm models (pretrained=False, small inputs)


def _timm(
    name: str, size: int = 64, **kwargs: Any
) -> Callable[[], tuple[nn.Module, Inputs, Inputs]]:
    def build() -> tuple[nn.Module, Inputs, Inputs]:
        import timm

        model = timm.create_model(name, pretrained=False, num_classes=3, **kwargs)
        pixels = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0))
        return model, {"x": pixels}, {"labels": torch.tensor([0, 2])}

    return build


TIMM_CASES: list[ModelCase] = [
    ModelCase(f"timm_{name}", "timm", _timm(name, **kwargs))
    for name, kwargs in [
        ("resnet18", {}),
        ("resnet50d", {}),
        ("mobilenetv3_small_100", {}),
        ("efficientnet_b0", {}),
        ("convnext_atto", {}),
        ("regnetx_002", {}),
        ("densenet121", {}),
        ("vit_tiny_patch16_224", {"img_size": 64}),
        ("deit_tiny_patch16_224", {"img_size": 64}),
        ("swin_tiny_patch4_window7_224", {"img_size": 64, "window_size": 2}),
        ("mixer_s16_224", {"img_size": 64}),
        ("resmlp_12_224", {"img_size": 64}),
        ("ghostnet_100", {}),
        ("mobilevit_xxs", {}),
        ("levit_128s", {"img_size": 64}),
        ("rexnet_100", {}),
        ("dla34", {}),
    ]
]

CASES: list[ModelCase] = TRANSFORMERS_CASES + TIMM_CASES


# ---------------------------------------------------------------------------------------------
# the two functions each capturer runs


def _loss(model: nn.Module, out: Any, extras: Inputs) -> torch.Tensor:
    if isinstance(out, torch.Tensor):  # timm: plain logits
        return nn.functional.cross_entropy(out, extras["labels"])
    return out.loss


def make_functions(
    case: ModelCase,
) -> tuple[Callable[..., Any], Callable[..., Any], nn.Module, Inputs, Inputs]:
    """The inference function, the training step, the model and their inputs."""
    torch.manual_seed(0)
    model, inputs, extras = case.build()
    if case.family == "timm":

        def step(**kwargs: Any) -> torch.Tensor:
            labels = kwargs.pop("labels")
            loss = nn.functional.cross_entropy(model(**kwargs), labels)
            loss.backward()
            return loss.detach()

    else:

        def step(**kwargs: Any) -> torch.Tensor:
            loss = model(**kwargs).loss
            loss.backward()
            return loss.detach()

    return model, step, model, inputs, extras


def _first_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    return text.splitlines()[0][:300]


def _ember_reason(graph_break: Any) -> str:
    where = graph_break.location
    place = where.short() if where is not None else "?"
    code = f" `{where.code}`" if where is not None and where.code else ""
    return f"[{graph_break.id}] {place}: {graph_break.message}{code}"


def _dynamo_reason(reason: Any) -> str:
    stack = getattr(reason, "user_stack", None) or []
    place = f"{Path(stack[-1].filename).name}:{stack[-1].lineno}" if stack else "?"
    text = str(getattr(reason, "reason", reason)).strip().splitlines()
    return f"{place}: {' '.join(line.strip() for line in text[:3])[:240]}"


@contextlib.contextmanager
def _mode(model: nn.Module, mode: str) -> Iterator[None]:
    if mode == "inference":
        model.eval()
        with torch.no_grad():
            yield
    else:
        model.train()
        yield


def run_ember(
    fn: Callable[..., Any], model: nn.Module, kwargs: Inputs, mode: str, fullgraph: bool
) -> CaptureCount:
    import ember.capture

    count = CaptureCount()
    started = time.perf_counter()
    try:
        with _mode(model, mode):
            result = ember.capture.explain(fn)(**kwargs)
        count.graphs = result.graph_count
        count.breaks = result.break_count
        count.reasons = [_ember_reason(b) for b in result.breaks]
    except Exception as error:  # noqa: BLE001 - a failure is a result here
        count.error = _first_line(error)
    count.seconds = time.perf_counter() - started
    if fullgraph:
        try:
            with _mode(model, mode):
                ember.capture.compile(fn, backend="eager", fullgraph=True)(**kwargs)
            count.fullgraph = "ok"
        except Exception as error:  # noqa: BLE001
            count.fullgraph = _first_line(error)
    return count


def run_dynamo(
    fn: Callable[..., Any], model: nn.Module, kwargs: Inputs, mode: str, fullgraph: bool
) -> CaptureCount:
    import torch._dynamo

    count = CaptureCount()
    started = time.perf_counter()
    torch._dynamo.reset()
    try:
        with _mode(model, mode):
            result = torch._dynamo.explain(fn)(**kwargs)
        count.graphs = result.graph_count
        count.breaks = result.graph_break_count
        count.reasons = [_dynamo_reason(r) for r in result.break_reasons]
    except Exception as error:  # noqa: BLE001
        count.error = _first_line(error)
    count.seconds = time.perf_counter() - started
    if fullgraph:
        torch._dynamo.reset()
        try:
            with _mode(model, mode):
                torch.compile(fn, backend="eager", fullgraph=True)(**kwargs)
            count.fullgraph = "ok"
        except Exception as error:  # noqa: BLE001
            count.fullgraph = _first_line(error)
        torch._dynamo.reset()
    return count


def _drop_dropout(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


def measure(case: ModelCase, modes: list[str], fullgraph: bool, peer: bool = True) -> list[Row]:
    rows = []
    for mode in modes:
        forward, step, model, inputs, extras = make_functions(case)
        _drop_dropout(model)
        fn, kwargs = (forward, inputs) if mode == "inference" else (step, {**inputs, **extras})
        ember_count = run_ember(fn, model, kwargs, mode, fullgraph)
        model.zero_grad(set_to_none=True)
        dynamo_count = run_dynamo(fn, model, kwargs, mode, fullgraph) if peer else CaptureCount()
        rows.append(Row(case.name, case.family, mode, ember_count, dynamo_count))
    return rows


# ---------------------------------------------------------------------------------------------
# guard cost


def guard_cost_us(case: ModelCase, calls: int = 2000) -> tuple[float | None, float | None, int]:
    """Per-call guard check time (microseconds) of the inference entry's first cache entry,
    ember's generated check and Dynamo's guard manager, on `model.forward` compiled by each;
    and how many guards ember's entry holds."""
    import inspect

    import torch._dynamo

    import ember.capture
    from ember.capture.translate import FUNCTION_KEY

    _, _, model, inputs, _ = make_functions(case)
    model.eval()
    forward = model.forward
    function = forward.__func__
    bound = inspect.signature(function, follow_wrapped=False).bind(model, **inputs)
    bound.apply_defaults()
    frame_locals = dict(bound.arguments)
    # A decorator's wrapper reads its closure: Dynamo's guards find free variables in f_locals.
    for name, cell in zip(function.__code__.co_freevars, function.__closure__ or ()):
        frame_locals[name] = cell.cell_contents
    ember_us = dynamo_us = None
    ember_guards = 0
    with torch.no_grad():
        compiled = ember.capture.compile(forward, backend="eager")
        compiled(**inputs)
        state = compiled.__func__._ember_compiled
        if state.table.entries:
            check = state.table.entries[0].check
            ember_guards = len(check.guards)
            arguments = {**frame_locals, FUNCTION_KEY: function}
            globals_dict = function.__globals__
            assert check.check(arguments, globals_dict), check.failure(arguments, globals_dict)
            ember_us = _per_call(lambda: check.check(arguments, globals_dict), calls)
        torch._dynamo.reset()
        torch.compile(forward, backend="eager")(**inputs)
        cache_entries = torch._C._dynamo.eval_frame._debug_get_cache_entry_list(function.__code__)
        if cache_entries:
            manager = cache_entries[0].guard_manager
            assert manager.check(frame_locals), "Dynamo's guards fail on the call's arguments"
            dynamo_us = _per_call(lambda: manager.check(frame_locals), calls)
        torch._dynamo.reset()
    return ember_us, dynamo_us, ember_guards


def _per_call(fn: Callable[[], Any], calls: int) -> float:
    for _ in range(50):
        fn()
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(runs)


# ---------------------------------------------------------------------------------------------
# report


def _cell(count: CaptureCount) -> str:
    if count.error is not None:
        return "error"
    return f"{count.graphs}/{count.breaks}"


def _fullgraph_cell(count: CaptureCount) -> str:
    if count.fullgraph is None:
        return "-"
    return "ok" if count.fullgraph == "ok" else "fails"


def print_table(rows: list[Row], reasons: bool) -> None:
    print(
        f"{'model':<28} {'mode':<9} {'ember g/b':>10} {'dynamo g/b':>11} {'fullgraph e/d':>14}  verdict"
    )
    for row in rows:
        verdict = "ok"
        if row.ember.error is not None:
            verdict = f"EMBER ERROR {row.ember.error[:80]}"
        elif row.dynamo.error is None and row.ember.breaks > row.dynamo.breaks:
            verdict = f"+{row.ember.breaks - row.dynamo.breaks} breaks"
        full = f"{_fullgraph_cell(row.ember)}/{_fullgraph_cell(row.dynamo)}"
        print(
            f"{row.model:<28} {row.mode:<9} {_cell(row.ember):>10} {_cell(row.dynamo):>11}"
            f" {full:>14}  {verdict}"
        )
        if reasons:
            for who, count in (("ember", row.ember), ("dynamo", row.dynamo)):
                tally = collections.Counter(count.reasons)
                for reason, times in tally.most_common():
                    print(f"    {who:<6} {times}x {reason[:200]}")
                if count.error:
                    print(f"    {who:<6} error: {count.error}")
                if count.fullgraph not in (None, "ok"):
                    print(f"    {who:<6} fullgraph: {count.fullgraph[:200]}")
    totals = {
        who: sum(getattr(row, who).breaks for row in rows if getattr(row, who).error is None)
        for who in ("ember", "dynamo")
    }
    worse = sum(
        1
        for row in rows
        if row.ember.error is not None
        or (row.dynamo.error is None and row.ember.breaks > row.dynamo.breaks)
    )
    print(
        f"\n{len(rows)} rows; total breaks ember {totals['ember']}, dynamo {totals['dynamo']};"
        f" rows where ember breaks more or fails: {worse}"
    )
    causes = collections.Counter(
        reason.split("]")[0] + "]" for row in rows for reason in row.ember.reasons
    )
    if causes:
        print("ember break kinds: " + ", ".join(f"{k} {n}" for k, n in causes.most_common()))


def available(case: ModelCase) -> str | None:
    """None when the case can run here, else why not."""
    module = "timm" if case.family == "timm" else "transformers"
    try:
        __import__(module)
    except ImportError:
        return f"{module} is not installed"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--models", default="", help="comma-separated names (default: all)")
    parser.add_argument("--modes", default="inference,training")
    parser.add_argument("--no-fullgraph", action="store_true")
    parser.add_argument("--reasons", action="store_true", help="print every break reason")
    parser.add_argument("--guards", action="store_true", help="time guard checks (inference)")
    parser.add_argument("--json", default="", help="write the rows here")
    options = parser.parse_args(argv)
    torch.set_num_threads(1)
    wanted = {name for name in options.models.split(",") if name}
    cases = [case for case in CASES if not wanted or case.name in wanted]
    modes = [mode for mode in options.modes.split(",") if mode]
    print(f"torch {torch.__version__}, Python {sys.version.split()[0]}")
    rows: list[Row] = []
    guard_rows: list[dict[str, Any]] = []
    for case in cases:
        missing = available(case)
        if missing is not None:
            print(f"skip {case.name}: {missing}")
            continue
        try:
            found = measure(case, modes, fullgraph=not options.no_fullgraph)
        except Exception:  # noqa: BLE001 - building the model failed
            print(f"skip {case.name}: could not build\n{traceback.format_exc(limit=3)}")
            continue
        rows.extend(found)
        for row in found:
            print(
                f"  {row.model:<28} {row.mode:<9} ember {_cell(row.ember):>7}"
                f" ({row.ember.seconds:.1f} s)  dynamo {_cell(row.dynamo):>7}"
                f" ({row.dynamo.seconds:.1f} s)",
                flush=True,
            )
        if options.guards:
            ember_us, dynamo_us, ember_n = guard_cost_us(case)
            guard_rows.append(
                {
                    "model": case.name,
                    "ember_us": ember_us,
                    "dynamo_us": dynamo_us,
                    "ember_guards": ember_n,
                }
            )
            print(f"  guards: ember {ember_us} us ({ember_n}), dynamo {dynamo_us} us", flush=True)
    print()
    print_table(rows, options.reasons)
    if guard_rows:
        print(f"\n{'model':<28} {'ember guard us':>15} {'dynamo guard us':>16}")
        for g in guard_rows:
            e = f"{g['ember_us']:.1f}" if g["ember_us"] is not None else "-"
            d = f"{g['dynamo_us']:.1f}" if g["dynamo_us"] is not None else "-"
            print(f"{g['model']:<28} {e:>15} {d:>16}")
    if options.json:
        Path(options.json).write_text(
            json.dumps({"rows": [asdict(r) for r in rows], "guards": guard_rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
