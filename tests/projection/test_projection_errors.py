"""Each projection failure is raised as the kind that says whose it is: the user's environment
(``ConfigError``, one line and exit 2), a data file shipped with the package (``DataFileError``,
not a user error), or the caller's argument (``ValueError``)."""
import pytest

from torch_neuronx.projection import hardware, job, published
from torch_neuronx.runtime.errors import ConfigError, DataFileError, UserError


def test_an_lnc_from_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "2")
    with pytest.raises(ConfigError, match="NEURON_LOGICAL_NC_CONFIG=2 is not supported on trn1.2xlarge"):
        hardware.device_model("trn1.2xlarge")


def test_an_lnc_argument_is_the_callers_error_not_the_environments(monkeypatch):
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    with pytest.raises(ValueError, match=r"LNC=2 is not supported on trn1.2xlarge \(allowed: 1\)") as raised:
        hardware.device_model("trn1.2xlarge", lnc=2)
    assert not isinstance(raised.value, UserError)


def test_an_instance_without_projection_data_is_a_data_file_error(monkeypatch):
    data = hardware.load_data()
    monkeypatch.setitem(data, "instances", {k: v for k, v in data["instances"].items() if k != "trn2.3xlarge"})
    with pytest.raises(DataFileError, match="no projection data for instance profile 'trn2.3xlarge'"):
        hardware.device_model("trn2.3xlarge")


def test_unreadable_fitted_factors_are_a_data_file_error(monkeypatch, tmp_path):
    monkeypatch.setattr(job, "FACTORS_FILE", tmp_path / "fitted_factors.json")
    job.clear_cache()
    try:
        with pytest.raises(DataFileError, match="cannot read the fitted factors") as raised:
            job.fitted_factors()
        assert not isinstance(raised.value, UserError)
    finally:
        monkeypatch.undo()
        job.clear_cache()


def test_unreadable_traced_work_says_how_to_regenerate_it(tmp_path):
    (tmp_path / "work.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(DataFileError, match="run `torchneuron plan --validate --retrace`"):
        published.load_work(tmp_path / "work.json")


def test_an_unknown_error_band_figure_is_the_callers_error():
    with pytest.raises(ValueError, match="no leave-one-out error for 'watts'") as raised:
        job.error_band("watts")
    assert not isinstance(raised.value, UserError)
