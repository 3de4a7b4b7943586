"""Every decoder family of issue 44 as ``transformers`` writes its config (``save_pretrained``
and ``to_dict``), read by diffcost: within 0.1 % of ``transformers``' own parameter count, or
refused for its true architectural reason.

The configs are built offline from each family's config class with the arguments of
tests/data/hf_families.json; the counts there are ``transformers``' models on PyTorch's meta
device, written with the versions used by ``python benchmarks/hf_families.py --write`` (which
also prints the per-family table).  The default run needs no torch; the slow test rebuilds the
counts where torch is installed.
"""

import json
from pathlib import Path

import pytest

import diffcost as dc
from diffcost.testing import hf_document, model_module

TABLE = json.loads((Path(__file__).parent / "data" / "hf_families.json").read_text())
CASES = TABLE["cases"]
#: case -> (the key refused, a phrase of its reason): the true reason, not a missing key.
REFUSED = {
    "gpt_oss": ("model_type", "attention sinks are not modelled"),
    "llama4_text": ("attention_chunk_size", "chunked local attention is not modelled"),
    "t5": ("model_type", "is an encoder-decoder model"),
    "mamba": ("model_type", "is a state-space model"),
}
#: The families issue 44 lists (InternLM as transformers' internlm3; Phi-4 and Command-R are
#: phi3 and cohere configs).
ISSUE_FAMILIES = {
    "llama", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "mistral", "mixtral", "gemma", "gemma2",
    "gemma3_text", "phi", "phi3", "deepseek_v2", "deepseek_v3", "gpt_oss", "falcon", "bloom",
    "gptj", "gpt_neox", "opt", "starcoder2", "olmo", "olmo2", "olmoe", "granite", "cohere",
    "internlm3", "gpt2", "llama4_text", "t5", "mamba",
}  # fmt: skip
TOLERANCE = 1e-3


def _config(case: str):
    """The case's config object; skipped where the installed transformers predates its family
    (transformers 4.51 has no deepseek_v2, gpt_oss or internlm3)."""
    import transformers

    entry = CASES[case]
    if entry["model_type"] not in transformers.CONFIG_MAPPING:
        pytest.skip(f"transformers {transformers.__version__} has no {entry['model_type']!r}")
    return transformers.AutoConfig.for_model(entry["model_type"], **entry["config"])


def _written(case: str, way: str, folder: Path) -> Path:
    """The case's config as ``transformers`` writes it: ``save_pretrained`` or ``to_dict()``."""
    cfg = _config(case)
    if way == "save_pretrained":
        cfg.save_pretrained(folder)
    else:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(cfg.to_dict(), default=str))
    return folder / "config.json"


def test_the_table_covers_every_family_of_the_issue():
    assert {entry["model_type"] for entry in CASES.values()} == ISSUE_FAMILIES
    assert set(REFUSED) <= set(CASES)


@pytest.mark.parametrize("way", ["save_pretrained", "to_dict"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_family_is_read_within_0_1_percent_or_refused_for_its_reason(tmp_path, case, way):
    path = _written(case, way, tmp_path / case)
    if case in REFUSED:
        key, phrase = REFUSED[case]
        with pytest.raises(dc.SpecError) as err:
            hf_document(path)
        problems = {p.key: p.reason for p in err.value.problems}
        assert list(problems) == [key] and phrase in problems[key]
        return
    params = float(model_module(hf_document(path)).num_params())
    assert params == pytest.approx(CASES[case]["transformers_params"], rel=TOLERANCE)


@pytest.mark.slow
def test_the_stored_counts_are_transformers_meta_device_counts():
    """The table's counts are what the installed transformers builds (regenerate with
    ``python benchmarks/hf_families.py --write`` when a version changes them)."""
    torch = pytest.importorskip("torch")
    import transformers

    for case, entry in CASES.items():
        cfg = _config(case)
        auto = (
            transformers.AutoModelForSeq2SeqLM
            if cfg.is_encoder_decoder
            else transformers.AutoModelForCausalLM
        )
        with torch.device("meta"):
            model = auto.from_config(cfg)
        assert sum(p.numel() for p in model.parameters()) == entry["transformers_params"], case
