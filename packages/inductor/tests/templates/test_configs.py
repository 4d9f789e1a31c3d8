"""The GEMM template's candidate list: pruned by the H100 measurements, it keeps every
configuration that was the best of all candidates on a measured product
(docs/perf/templates.md, run 2), and drops small tiles where 128x128 tiles fill the GPU and
TMA over short K loops."""

from __future__ import annotations

import pytest
import torch

from ember.inductor.templates.configs import GemmConfig, gemm_configs

# (M, N, K) -> the best configuration in run 2 (block_m, block_n, block_k, warps, stages,
# tma, persistent, split_k; warps and stages None where the run did not name them)
MEASURED_BEST: dict[tuple[int, int, int], tuple[object, ...]] = {
    (256, 256, 256): (16, 32, 64, 2, None, False, False, 1),
    (512, 512, 512): (64, 64, 64, None, None, False, False, 1),
    (1024, 1024, 1024): (64, 128, 64, None, None, False, False, 1),
    (2048, 2048, 2048): (128, 256, 64, None, None, False, False, 1),
    (4096, 4096, 4096): (128, 256, None, None, None, True, True, 1),
    (8192, 8192, 8192): (128, 256, None, None, None, True, True, 1),
    (4096, 2304, 768): (128, 128, 32, None, None, False, False, 1),
    (4096, 3072, 768): (128, 256, 64, None, None, False, False, 1),
    (4096, 768, 3072): (128, 128, 64, 4, 3, True, False, 1),
    (2048, 11008, 4096): (128, 256, None, None, None, True, True, 1),
    (2048, 4096, 11008): (128, 256, None, None, None, True, True, 1),
    (1024, 1024, 8192): (128, 128, 64, None, None, False, False, 2),
    (512, 512, 16384): (128, 128, 64, None, None, False, False, 8),
}


def _matches(config: GemmConfig, best: tuple[object, ...]) -> bool:
    fields = (
        config.block_m,
        config.block_n,
        config.block_k,
        config.num_warps,
        config.num_stages,
        config.tma,
        config.persistent,
        config.split_k,
    )
    return all(want is None or want == have for want, have in zip(best, fields))


@pytest.mark.parametrize(("shape", "best"), sorted(MEASURED_BEST.items()))
def test_the_measured_best_stays_a_candidate(
    shape: tuple[int, int, int], best: tuple[object, ...]
) -> None:
    m, n, k = shape
    configs = gemm_configs(m, n, k, torch.bfloat16, tma=True, split=True)
    assert any(_matches(config, best) for config in configs), configs


def test_small_tiles_only_where_large_ones_leave_sms_idle() -> None:
    # BERT-base's products at 16x512 tokens: 384+ tiles of 128x128
    for n, k in ((768, 768), (3072, 768), (768, 3072), (30522, 768)):
        configs = gemm_configs(8192, n, k, torch.bfloat16, tma=True, split=True)
        assert all(c.block_m * c.block_n >= 128 * 128 for c in configs)
    # 64 tiles of 128x128 (a batch of 4: 256 tiles)
    alone = gemm_configs(1024, 1024, 1024, torch.bfloat16)
    assert any(c.block_m * c.block_n < 128 * 128 for c in alone)
    batched = gemm_configs(1024, 1024, 1024, torch.bfloat16, batch=4)
    assert all(c.block_m * c.block_n >= 128 * 128 for c in batched)
    # rows fewer than 128: every tile is small, none dropped
    assert gemm_configs(64, 65536, 1024, torch.bfloat16)


def test_tma_only_over_long_k_loops() -> None:
    def tma(k: int) -> list[GemmConfig]:
        return [c for c in gemm_configs(8192, 3072, k, torch.bfloat16, tma=True) if c.tma]

    assert tma(768) == []
    assert {(c.block_m, c.block_n, c.persistent) for c in tma(1024)} == {
        (128, 256, True),
        (128, 128, False),
    }
