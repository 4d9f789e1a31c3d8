"""launch_census: the counts of a generated Triton wrapper, and a real model's census."""

from __future__ import annotations

from benchmarks.launch_census import _compiled_graphs, census

MODULE = """
@triton.jit
def triton_cast(p_arg0, p_arg1, XBLOCK: tl.constexpr):
    tmp1 = tl.load(p_arg0 + (x0), xmask, other=0)
    tl.store(p_arg1 + (x0), tmp1.to(tl.bfloat16), xmask)


@triton.jit
def triton_add(p_arg0, p_arg1, p_arg2, XBLOCK: tl.constexpr):
    tmp1 = tl.load(p_arg0 + (x0), xmask, other=0)
    tmp2 = tl.load(p_arg1 + (x0), xmask, other=0)
    tl.store(p_arg2 + (x0), tmp1 + tmp2, xmask)
"""

WRAPPER = """def call(args):
    in0, in1, = args
    buf0 = empty_strided((4, 4, ), (4, 1, ), dtype=torch.bfloat16, device=DEVICE)
    kernels['triton_cast'].launch(16, in0, buf0)
    buf1 = ops['aten::mm.default'](buf0, as_strided(in1, (4, 4, ), (1, 4, ), 0))
    buf2 = empty_strided((4, 4, ), (4, 1, ), dtype=torch.bfloat16, device=DEVICE)
    kernels['triton_add'].launch(16, buf1, in1, buf2)
    kernels['triton_add'].launch(16, in0, in1, buf2)
    return (buf2, )
"""


def test_census_counts_launches_externs_allocations_and_input_only_kernels() -> None:
    counted = census("forward", WRAPPER, MODULE)
    assert counted.launches == 3
    # the cast reads in0 alone; the first add reads buf1 too; the second reads inputs only
    assert counted.input_only == 2
    assert dict(counted.externs) == {"mm": 1}
    assert counted.allocations == 2
    assert counted.views == 1


def test_a_models_census_matches_its_generated_code_and_restores_the_compiler() -> None:
    from ember.inductor.compiled import CompiledGraph

    call = CompiledGraph.__call__
    graphs = list(_compiled_graphs("hf_gpt2", "inference", "ci"))
    assert CompiledGraph.__call__ is call
    assert [name for name, _, _ in graphs] == ["forward"]
    name, wrapper, module = graphs[0]
    counted = census(name, wrapper, module)
    assert "@triton.jit" in module  # the GPU's code generator, not the CPU's
    assert counted.launches == wrapper.count(".launch(") > 0
    # under bf16 autocast each layer's weights and biases are cast from the parameters, as
    # horizontal launches (on by default): a few launches that read only inputs, one a layer
    assert "triton_horizontal" in wrapper
    assert counted.input_only >= 2
    assert counted.externs["addmm"] == 2 * 4  # 2 layers x (qkv, out, fc, proj)


def test_the_census_leaves_the_interpreter_setting_as_it_found_it(monkeypatch) -> None:
    import os

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    list(_compiled_graphs("hf_llama", "inference", "ci"))
    assert "TRITON_INTERPRET" not in os.environ
