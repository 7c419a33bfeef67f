"""One vocabulary of flags: the same dtype and instance spellings for every command, list options
that parse as the docs write them, the command's own help in a hint, a "did you mean"."""
from __future__ import annotations

import json

import pytest
import torch

from torch_neuronx.cli.main import build_parser, main, parse
from torch_neuronx.pilot import PilotConfig
from torch_neuronx.runtime.errors import UsageError
from torch_neuronx.runtime.spellings import DTYPE_SPELLINGS, dtype_name, pick


def _error(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("given, canonical", [("bf16", "bfloat16"), ("BFloat16", "bfloat16"), ("fp16", "float16"),
                                              ("half", "float16"), ("fp32", "float32"), ("float32", "float32")])
def test_every_dtype_spelling_names_one_dtype(given, canonical):
    assert dtype_name(given) == canonical
    cfg = PilotConfig(dtype=given)
    cfg.validate()
    assert cfg.dtype == canonical and cfg.torch_dtype == getattr(torch, canonical)


def test_an_unknown_dtype_lists_the_spellings_and_the_closest():
    with pytest.raises(UsageError) as info:
        dtype_name("bf61")
    message = str(info.value)
    assert message.startswith("--dtype 'bf61' is not a supported dtype; choose float32 (fp32/")
    assert all(name in message for names in DTYPE_SPELLINGS.values() for name in names)
    assert message.endswith("did you mean 'bf16'?")


def test_instance_names_match_in_any_case_with_a_did_you_mean():
    from torch_neuronx.runtime.profiles import PROFILES

    assert pick("TRN1.2XLarge", PROFILES, "--instance") == "trn1.2xlarge"
    with pytest.raises(UsageError, match=r"'trn2.3xlage' is not one of .*; did you mean 'trn2.3xlarge'\?$"):
        pick("trn2.3xlage", PROFILES, "--instance")


def test_pilot_seq_lens_as_written_before_or_after_the_model():
    parser = build_parser()
    for argv in (["pilot", "--seq-lens", "32", "64"], ["pilot", "--seq-lens", "32,64"]):
        args = parse(parser, argv)
        assert args.seq_lens == (32, 64) and getattr(args, "model", None) is None, argv
    for argv in (["pilot", "./ckpt", "--seq-lens", "32", "64"], ["pilot", "--seq-lens", "32", "64", "./ckpt"]):
        args = parse(parser, argv)
        assert args.seq_lens == (32, 64) and args.model == "./ckpt", argv
    with pytest.raises(UsageError, match="neither a length nor the MODEL"):
        parse(parser, ["pilot", "./a", "--seq-lens", "32", "./b"])
    with pytest.raises(UsageError, match="'x' is not a length"):
        parse(parser, ["pilot", "--seq-lens", "x"])


@pytest.mark.parametrize("argv, hint", [
    (["plan", "llama-3-8b", "--tpp", "4"], "(see torchneuron plan --help)"),
    (["pilot", "--seqlens", "8"], "(see torchneuron pilot --help)"),
    (["info", "--jsn"], "(see torchneuron info --help)"),
    (["coverage", "--olny", "llama"], "(see torchneuron coverage --help)"),
])
def test_a_mistyped_flag_points_to_the_commands_help_and_the_closest_flag(argv, hint, capsys):
    assert main(argv) == 2
    line = _error(capsys)
    assert line.endswith(hint) and "did you mean '--" in line, line


def test_info_takes_an_instance_in_any_case(capsys, clean_topology_env):
    import torch_neuronx

    with clean_topology_env.context():  # reconfigure exports TORCHNEURON_INSTANCE
        try:
            assert main(["info", "--json", "--instance", "TRN1.2xlarge"]) == 0
            assert json.loads(capsys.readouterr().out)["instance_type"] == "trn1.2xlarge"
        finally:
            torch_neuronx.reconfigure(instance=torch_neuronx.runtime.settings.setting("TORCHNEURON_INSTANCE").default)
    assert main(["info", "--instance", "trn1.2xlage"]) == 2
    assert "did you mean 'trn1.2xlarge'?" in _error(capsys)


def test_coverage_architectures_in_any_case_with_a_did_you_mean(capsys, tmp_path):
    from types import SimpleNamespace

    from torch_neuronx.cli.coverage import installed_architectures, select

    args = SimpleNamespace(popular=False, only="Llama,GPT2", limit=None)
    assert select(args, installed_architectures()) == ["llama", "gpt2"]
    assert main(["coverage", "--only", "lama", "--out", str(tmp_path / "cov")]) == 2
    assert "did you mean 'llama'?" in _error(capsys)
    assert main(["coverage", "--instance", "TRN2.3XLARGE", "--only", "llama", "--jobs", "0",
                 "--out", str(tmp_path / "cov")]) == 2  # the instance parsed; the bad --jobs stopped it
    assert "--jobs" in _error(capsys)


def test_plan_takes_the_shared_instance_and_dtype_spellings(capsys):
    """``plan`` parses ``--instance`` and its dtype flags as every command does: any case, the
    long dtype names as well as the short ones, a did-you-mean for a typo."""
    parser = build_parser()
    args = parse(parser, ["plan", "llama-3-8b", "--instance", "TRN1.32XLarge", "--precision", "BFloat16",
                          "--dtype", "half", "--weight-dtype", "INT8"])
    assert (args.instance, args.precision, args.dtype, args.weight_dtype) == ("trn1.32xlarge", "bf16", "fp16", "int8")
    assert parse(parser, ["plan", "llama-3-8b", "--precision", "AUTOCAST-BF16"]).precision == "autocast-bf16"
    assert parse(parser, ["plan", "llama-3-8b", "--dtype", "float32"]).dtype == "fp32"
    for argv, closest in ((["--instance", "trn1.32xlage"], "'trn1.32xlarge'"), (["--weight-dtype", "int9"], "'int8'"),
                          (["--precision", "bf61"], "'bf16'")):
        assert main(["plan", "llama-3-8b", *argv]) == 2
        line = _error(capsys)
        assert f"did you mean {closest}? (see torchneuron plan --help)" in line and argv[1] in line, line
    assert main(["plan", "llama-3-8b", "--dtype", "autocast-bf16"]) == 2  # --dtype takes a dtype only
    assert "is not one of bf16 (bfloat16/bf16), fp16 (" in _error(capsys)


def test_plan_names_a_bundled_model_in_any_case_with_a_did_you_mean(capsys):
    from torch_neuronx.plan.model_config import bundled_name

    assert bundled_name("Llama-3-8B") == "llama-3-8b"
    assert bundled_name("BERT-LARGE-UNCASED") == "bert-large-uncased"
    assert main(["plan", "lama-3-8b"]) == 2
    line = _error(capsys)
    assert "is neither a config.json, a checkpoint directory nor a bundled config (" in line
    assert line.endswith("did you mean 'llama-3-8b'?"), line
