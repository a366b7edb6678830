"""Property: any `ict train` configuration, written the way a run stores it (RUN_DIR/config.yaml,
`save_config`) and read back the way ``--resume`` reads it (`build_config`), is the same
configuration; texts YAML reads otherwise (``no``, ``1e3``, ``0o17``, ``~``, ``: ``, ``#``,
leading zeros, unicode) included."""

from __future__ import annotations

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from ict.core.options import dump_options_yaml, text_option_names
from ict.training.config import TrainConfig
from ict.training.config_loading import build_config, save_config
from ict.training.config_text import load_yaml

YAML_PIECES = ["no", "yes", "on", "off", "true", "1e3", "0o17", "0x1F", "017", "1_000", "1:30", "~", "null",
               "None", ": ", "#", "- ", "'", '"', "2024-01-01", ".inf", ".nan", "+1", "-0", "0.5", "é", "\u2028",
               "\t", " ", "\n", "{", "[", "&a", "*a", "!", "%", "@", "`", "|", ">"]
texts = st.lists(st.sampled_from(YAML_PIECES) | st.text(max_size=3), max_size=4).map("".join)
task_values = (texts | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.booleans() | st.none())
task_options = st.dictionaries(st.from_regex(r"[a-z][a-z_]{0,7}", fullmatch=True), task_values, max_size=4)


TEXT_OPTIONS = sorted(text_option_names(TrainConfig))


@given(dataset_config=task_options, name=st.sampled_from(TEXT_OPTIONS), text=texts)
@example(dataset_config={"label": "1e3", "mode": "0o17"}, name="system_prompt", text="0o17")
def test_options_written_as_config_yaml_read_back_as_they_were(tmp_path_factory, dataset_config, name, text):
    """`save_config`'s writer (`dump_options_yaml`) and --resume's reader (`load_yaml`, with its
    checks of text and ``dataset_config`` values) round-trip any task options and any text option.
    A text in dataset_config that YAML 1.2 reads as a number (``1e3``, given quoted as the refusal
    of it plain says to) was written plain by yaml.safe_dump (YAML 1.1's text), and the run's own
    --resume refused its config.yaml."""
    path = tmp_path_factory.mktemp("run") / "config.yaml"
    values = {"dataset_config": dataset_config, name: text}
    path.write_text(dump_options_yaml(values))
    assert load_yaml(path) == values


def test_a_text_dataset_option_that_yaml_12_reads_as_a_number_survives_resume(tmp_path):
    """Regression: ``dataset_config: {label: '1e3'}`` (quoted, a text) was stored as ``label: 1e3``
    and --resume refused it ('YAML 1.1 reads an unquoted 1e3 as '1e3', YAML 1.2 as 1000.0')."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config_file = tmp_path / "c.yaml"
    config_file.write_text("dataset_config:\n  label: '1e3'\n  mode: '0o17'\n")
    first = build_config(config_file, {"run_dir": str(run_dir)}, {})
    save_config(first, run_dir / "config.yaml")
    resumed = build_config(None, {"run_dir": str(run_dir), "resume": True}, {})
    assert (resumed.dataset_config["label"], resumed.dataset_config["mode"]) == ("1e3", "0o17")
    text = (run_dir / "config.yaml").read_text()
    assert "label: '1e3'" in text and list(yaml.safe_load(text)) == list(first.to_dict())  # in field order
