"""benchmarks/sanitize.py refuses a misspelled model before any model runs."""

from __future__ import annotations

import pytest

from benchmarks import sanitize


def test_unknown_model_is_refused_before_running(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        sanitize.main(["--models", "hf_gpt2,timm_vit", "--no-sanitizer", "--out", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "no such suite model: timm_vit" in capsys.readouterr().err
    assert not (tmp_path / "summary.md").exists()
