"""The docs and the configs that restate a default agree with where it lives (issue 32 item 1):
the selector registry (selector options, a method's training options) and `TrainConfig`."""

from __future__ import annotations

import dataclasses
import inspect
import re

import pytest
import yaml
from docs_helpers import ROOT, command_parsers, flat

from ict.core.selectors import SELECTORS, TRAIN_OPTION_DEFAULTS, method_train_options


def _value(text: str):
    """A documented value: a number (``2e-4`` too, which YAML 1.1 reads as text), else YAML."""
    try:
        return float(text) if not text.isdigit() else int(text)
    except ValueError:
        return yaml.safe_load(text)


def test_the_selector_table_of_docs_method_matches_the_registry():
    """Every `key=value` in the options column of docs/method.md's selector table is the
    registry's default (selector option or the method's training option), and every registered
    built-in option is listed."""
    lines = (ROOT / "docs" / "method.md").read_text().splitlines()
    start = lines.index("| name | method | options (defaults) | population | rule |")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    seen = set()
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        name = cells[0].strip("`")
        if name not in SELECTORS or len(cells) < 3:
            continue
        seen.add(name)
        stated = dict(re.findall(r"`([a-z_0-9]+)=([^`]+)`", cells[2]))
        defaults = {**SELECTORS[name].defaults, **method_train_options(name)}
        for key, text in stated.items():
            assert key in defaults, (name, key)
            expected = defaults[key]
            assert _value(text) == expected or str(expected) == text, (name, key, text, expected)
        listed = set(stated) - set(TRAIN_OPTION_DEFAULTS)
        assert listed == set(SELECTORS[name].defaults), (name, set(SELECTORS[name].defaults) - listed)
    assert {"all", "entropy", "stapo", "ict", "random", "clip_cov", "kl_cov"} <= seen


def test_the_config_that_writes_out_the_defaults_matches_them():
    """configs/offline-default.yaml claims to write out `ict train`'s defaults: every value above
    its "Not defaults" line is the resolved default configuration's."""
    from ict.training.config_loading import build_config

    text = (ROOT / "configs" / "offline-default.yaml").read_text()
    claimed = yaml.safe_load(text.split("# Not defaults")[0])
    defaults = build_config(None).to_dict()
    for key, value in claimed.items():
        assert defaults[key] == value, (key, value, defaults[key])
    assert len(claimed) >= 14


def test_the_demo_figures_quoted_in_the_readme_are_the_benchmark_docs():
    """The README quotes `make demo`'s time and held-out accuracy (before -> after the warm-up ->
    after ICT) from docs/benchmarks.md, where the measurement is described: both places give the
    same numbers."""
    readme = (ROOT / "README.md").read_text()
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text()
    quoted = re.search(r"\((\d+ min \d+ s) from a fresh clone with installs\): \*\*0\.375 -> "
                       r"(0\.\d+) after the warm-up -> (0\.\d+) after ICT\*\*", " ".join(readme.split()))
    assert quoted, "README's demo line changed: update this test"
    minutes, warmed, after = quoted.groups()
    flat = " ".join(benchmarks.split())
    assert f"**{minutes}**" in flat and f"| 0.375 | {warmed} | **{after}** |" in flat
    assert (ROOT / "configs" / "demo.yaml").is_file()


def test_every_config_builds_as_the_commands_that_read_it_build_it(tmp_path):
    """Each configs/*.yaml resolves through `ict train --config`'s loader; a comparison's config
    (it says `ict compare` reads it) also builds every default method's run (compare's loader),
    as `ict compare --config` does before anything trains."""
    from ict.experiments.compare import CompareConfig, _training_config, compare_options
    from ict.training.config_loading import build_config
    from ict.training.config_text import load_yaml

    paths = sorted((ROOT / "configs").glob("*.yaml"))
    assert len(paths) >= 9
    compared = 0
    for path in paths:
        assert build_config(path).num_steps > 0, path
        if "ict compare" not in path.read_text():
            continue
        ours, training = compare_options(load_yaml(path))
        config = CompareConfig(**ours, config_file=str(path), output_dir=tmp_path / path.stem).validate()
        for spec in config.method_specs:
            assert _training_config(config, training, spec, 0).method == spec.name, (path, spec)
        compared += 1
    assert compared >= 5


def _metrics_table_names() -> set[str]:
    """The field names in the first column of docs/training.md's metrics table (`x[_selected]`
    is x and x_selected; a row saying "`all_` twins" adds all_<name> for each selected_<name>)."""
    text = (ROOT / "docs" / "training.md").read_text()
    section = text.split("## Metrics (`RUN_DIR/metrics.jsonl`)", 1)[1].split("\n## ", 1)[0]
    names = set()
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        first = row.split("|")[1]
        for name in re.findall(r"`([a-z0-9_\[\]]+)`", first):
            base = name.replace("[_selected]", "")
            names |= {base, base + "_selected"} if "[_selected]" in name else {name}
        if "`all_` twins" in first:
            names |= {"all_" + name[len("selected_"):] for name in list(names) if name.startswith("selected_")}
        names |= set(re.findall(r"`([a-z0-9_]+)`", row.split("|")[2]))  # e.g. generation_tokens_per_second
    return names


def test_every_field_of_a_metrics_line_is_in_the_docs_metrics_table():
    """docs/training.md's metrics table names every field a step's metrics line carries (the
    fixed fields, the paper's figures, the most frequent tokens, the warning and the sample)."""
    from ict.core.diagnostics import PAPER_FIGURE_KEYS, TOP_TOKEN_KEYS
    from ict.training.step_metrics import METRIC_FIELDS

    fields = {*METRIC_FIELDS, *PAPER_FIGURE_KEYS, *TOP_TOKEN_KEYS.values(), "entropy_warning",
              "sample_completion", "generation_tokens_per_second"}
    missing = sorted(fields - _metrics_table_names())
    assert not missing, f"docs/training.md's metrics table lacks {missing}"


@pytest.mark.parametrize("name", ["docs/training.md", "docs/method.md", "docs/evaluation.md"])
def test_the_python_snippets_of_the_docs_run(name):
    """Each Python block of the docs runs as written (a registered selector or reward is removed
    again, so it does not leak into other tests)."""
    from ict.answers.rewards import REWARDS
    from ict.core.selectors import SELECTORS

    selectors, rewards = dict(SELECTORS), dict(REWARDS)
    try:
        for index, block in enumerate(re.findall(r"```python\n(.*?)```", (ROOT / name).read_text(), flags=re.S)):
            exec(compile(block, f"{name} python block {index}", "exec"), {"__name__": "doc_snippet"})
    finally:
        SELECTORS.clear()
        SELECTORS.update(selectors)
        REWARDS.clear()
        REWARDS.update(rewards)


def test_the_options_a_resume_may_change_are_the_ones_docs_training_lists():
    """docs/training.md lists the options `--resume` lets change; they are `RESUME_MAY_CHANGE`
    (besides `resume` and `run_dir` themselves)."""
    from ict.training.config_loading import RESUME_MAY_CHANGE

    listed = re.search(r"options that only say how long and how visibly it runs may change \((.*?)\), and",
                       flat("docs/training.md"))
    assert listed, "docs/training.md's resume sentence changed: update this test"
    assert set(re.findall(r"`([a-z_]+)`", listed.group(1))) == RESUME_MAY_CHANGE - {"resume", "run_dir"}


def test_the_eval_settings_a_comparison_rerun_must_keep_are_the_ones_docs_training_lists():
    """docs/training.md names the `--eval-*` settings a comparison rerun must share with an
    evaluation it reuses, in words; each word is one of `EVAL_SETTINGS` and every setting but the
    sampling seed (always 0 in a comparison) is named, top-p and the system prompt (fixed in a
    comparison) in a sentence of their own."""
    from ict.experiments.compare import EVAL_SETTINGS

    words = {"benchmarks": "benchmarks", "data directory": "data_dir", "samples": "num_samples",
             "ks": "ks", "temperature": "temperature", "length": "max_new_tokens", "limit": "limit",
             "extraction": "math_extraction answer_extraction"}
    listed = re.search(r"`--eval-\*` settings \(([^)]*)\) differ", flat("docs/training.md"))
    assert listed, "docs/training.md's compare rerun sentence changed: update this test"
    named = [word.strip() for word in listed.group(1).split(",")]
    assert set(named) <= set(words), set(named) - set(words)
    assert {field for word in named for field in words[word].split()} == set(EVAL_SETTINGS) - {
        "seed", "top_p", "system_prompt"}  # no --eval-* options: the next sentence names them
    assert "sampled at another top-p or after a system prompt" in flat("docs/training.md")


def test_the_run_json_settings_docs_evaluation_lists_are_the_ones_a_resume_checks():
    """docs/evaluation.md names, in words, the `run.json` settings whose change stops a resumed
    `ict eval`; they are `ict.evaluation.records.RESUME_KEYS`."""
    from ict.evaluation.records import RESUME_KEYS

    words = {"model": "model", "n": "num_samples", "greedy": "greedy", "temperature": "temperature",
             "top-p": "top_p", "max tokens": "max_new_tokens", "system prompt": "system_prompt",
             "answer extraction": "answer_extraction", "dtype": "dtype", "backend": "backend"}
    listed = re.search(r"If a setting in `run.json` differs \(([^)]*)\)", flat("docs/evaluation.md"))
    assert listed, "docs/evaluation.md's resume sentence changed: update this test"
    named = [word.strip() for word in listed.group(1).split(",")]
    assert set(named) <= set(words), set(named) - set(words)
    assert {words[word] for word in named} == set(RESUME_KEYS)


def test_the_references_docs_evaluation_gives_ict_inspect_are_its_choices():
    """docs/evaluation.md: `ict inspect --reference` takes any JS reference but `ref` (the view
    keeps no reference model); the option's choices are exactly those."""
    from ict.core.stats import JS_REFERENCES

    assert "JS score (`--reference`: any but `ref`," in flat("docs/evaluation.md")
    action = next(action for action in command_parsers()["inspect"]._actions if action.dest == "reference")
    assert set(action.choices) == set(JS_REFERENCES) - {"ref"}


def test_the_defaults_docs_state_in_words_are_the_codes():
    """Defaults the docs state in prose, each tied to where it lives (hand mutation testing: a
    changed constant left every other test passing): ict eval's completion length on a GPU and a
    CPU (also in its --help), `ict compare`'s default ks, an `rg:` set's size and seed, `keep_checkpoints`,
    `overlong_penalty_factor`, vLLM's CPU KV cache, the sampling temperature, the math check's time
    bound (ict train's and ict eval's), its workers' memory limit and ict eval's answer extractions."""
    from ict.answers.verify import DEFAULT_TIMEOUT_SECONDS, WORKER_MEMORY_LIMIT_BYTES, verify_math
    from ict.data.benchmark_names import REASONING_GYM_DEFAULT_SIZE, REASONING_GYM_EVAL_SEED
    from ict.evaluation.evaluate import MAX_NEW_TOKENS_CPU, MAX_NEW_TOKENS_GPU, EvalConfig
    from ict.models.vllm_backend import VLLM_CPU_KVCACHE_GIB
    from ict.training.config import TrainConfig
    from ict.training.config_loading import build_config

    evaluation, training = flat("docs/evaluation.md"), flat("docs/training.md")
    length = re.search(r"`--max-new-tokens` defaults to (\d+) on a GPU and (\d+) on a CPU", evaluation)
    assert length, "docs/evaluation.md's completion length sentence changed: update this test"
    assert (int(length[1]), int(length[2])) == (MAX_NEW_TOKENS_GPU, MAX_NEW_TOKENS_CPU)
    helped = " ".join(next(f for f in dataclasses.fields(EvalConfig) if f.name == "max_new_tokens")
                      .metadata["help"].split())
    assert f"{MAX_NEW_TOKENS_GPU} on a GPU, {MAX_NEW_TOKENS_CPU} on a CPU" in helped, helped
    assert f"`size=` (default {REASONING_GYM_DEFAULT_SIZE})" in evaluation
    ks = " and ".join(str(k) for k in EvalConfig().ks)
    assert f"by default those of {ks} that are at most `--eval-n`" in evaluation
    assert f"The default seed is **{REASONING_GYM_EVAL_SEED:_}**" in evaluation
    defaults = build_config(None)
    assert f"`keep_checkpoints` (default {defaults.keep_checkpoints})" in training
    assert f"`overlong_penalty_factor: f`, default {defaults.overlong_penalty_factor:g})" in training
    assert f"GiB ({VLLM_CPU_KVCACHE_GIB:g}; an exported" in training
    assert f"GiB (default {VLLM_CPU_KVCACHE_GIB:g}," in flat("docs/scaling.md")
    assert TrainConfig.vllm_cpu_kvcache_gib == VLLM_CPU_KVCACHE_GIB
    assert f"(`TrainConfig.temperature`, default {defaults.temperature}," in flat("docs/method.md")
    assert f"except the sampling temperature: the default is {defaults.temperature}" in training
    assert f"(`--verify-timeout`, default {DEFAULT_TIMEOUT_SECONDS:g} s)" in evaluation
    assert defaults.verify_timeout == EvalConfig().verify_timeout == DEFAULT_TIMEOUT_SECONDS
    assert f"Workers have an {WORKER_MEMORY_LIMIT_BYTES / 2**30:g} GiB address-space limit" in evaluation
    assert f"`{EvalConfig().math_extraction}` (default of `ict eval`)" in evaluation
    lenient = inspect.signature(verify_math).parameters["extraction"].default
    assert f"`{lenient}` (math-verify's defaults, and the default of `ict.answers.verify.verify_math`)" in evaluation
    assert f"by `--answer-extraction`: `{EvalConfig().answer_extraction}` (default;" in evaluation


def test_the_scientific_notation_docs_evaluation_writes_out_is_what_the_grader_writes():
    """docs/evaluation.md's examples of scientific notation written out before math-verify parses
    them (``4.5e33``, ``1.2\\times 10^{-5}``, ``1.5e120``: "15 followed by 119 zeros"; it said
    1.5) are `expand_scientific`'s output."""
    from ict.answers.extraction import expand_scientific

    evaluation = flat("docs/evaluation.md")
    written = re.search(r"A number in scientific notation \(`([^`]+)`, `([^`]+)`, `([^`]+)`.*?"
                        r"written out as its decimal \(`([^`]+)`, `([^`]+)`;", evaluation)
    zeros = re.search(r"`([^`]+)` is ([\d.]+) followed by (\d+) zeros", evaluation)
    assert written and zeros, "docs/evaluation.md's scientific notation sentence changed: update this test"
    assert expand_scientific(written[1]) == expand_scientific(written[2]) == written[4]
    assert expand_scientific(written[3]) == written[5]
    assert expand_scientific(zeros[1]) == zeros[2] + "0" * int(zeros[3])


def test_the_yaml_readings_docs_training_gives_are_the_config_files(tmp_path):
    """docs/training.md's examples of values YAML reads otherwise, each as a config file: the text
    options' (`system_prompt: 0123`, `dataset_subset: no` refused, `autocast: off` taken), a
    `dataset_config` value's (each one listed refused) and a number option's (`num_steps: 1e3`
    is 1000, `num_steps: 017` refused; neither was documented)."""
    from ict.core.errors import UsageError
    from ict.training.config_loading import build_config

    training = flat("docs/training.md")
    untyped = re.search(r"only where YAML 1\.1 and 1\.2 read it differently: ((?:`[^`]+`, )+)a date\)", training)
    taken = re.search(r"\(`num_steps: (\S+)` is (\d+)\)", training)
    refused = re.search(r"different numbers \(`num_steps: (\S+)`,", training)
    assert untyped and taken and refused, "docs/training.md's YAML reading sentences changed: update this test"

    def built(text: str):
        (tmp_path / "c.yaml").write_text(text + "\n")
        return build_config(str(tmp_path / "c.yaml"))

    for line in ["system_prompt: 0123", "dataset_subset: no", "num_steps: " + refused[1],
                 *(f"dataset_config: {{max_terms: {value}}}" for value in re.findall(r"`([^`]+)`", untyped[1])),
                 "dataset_config: {max_terms: 2024-01-01}"]:
        with pytest.raises(UsageError):
            built(line)
    assert built("autocast: off").autocast == "off"
    assert built("num_steps: " + taken[1]).num_steps == int(taken[2])


@pytest.mark.parametrize("copy", ["/tmp/vs-base3", "/tmp/vs-base"])
def test_the_recipes_that_compare_with_the_untrained_model_give_it_finished_runs(copy, tmp_path):
    """docs/results.md's recipes for each method minus the untrained model copy a comparison's
    runs and its `base-model/` evaluation (as runs/base/seed<k>/eval/) into `copy`, then run
    `ict compare --report-only --baselines base` there. Run as written (the copy in tmp_path), every
    `base` run is a finished evaluation of the runs' benchmarks (the recipes copied samples.jsonl
    alone, an evaluation the report takes as in progress: "Baselines: base (no runs of base)")."""
    import subprocess

    from ict.analysis.comparison_runs import load_runs

    blocks = [block for block in re.findall(r"^```\w*\n(.*?)^```", (ROOT / "docs" / "results.md").read_text(),
                                       flags=re.S | re.M)
              if f"ict compare --output-dir {copy} --report-only --baselines base" in block]
    assert len(blocks) == 1, f"docs/results.md's {copy} recipe changed: update this test"
    shell = "\n".join(line for line in blocks[0].splitlines() if not line.startswith("ict "))
    subprocess.run(["bash", "-euc", shell.replace(copy, str(tmp_path / "copy"))], cwd=ROOT, check=True)
    runs = load_runs(tmp_path / "copy")
    base = [run for run in runs if run.label == "base"]
    assert len(base) == 3 and not any(run.in_progress for run in base), [run.progress for run in base]
    trained = next(run for run in runs if run.label == "grpo")
    assert all(run.correct.keys() == trained.correct.keys() for run in base)


def test_the_readme_library_snippet_prints_what_its_comments_say(capsys):
    """The README's library-API block prints the selected count its comment works out
    (``B x ceil(ratio * T)``, each completion's top 10%) and the unbiased pass@4 of 3 correct in 8
    (``1 - C(5, 4) / C(8, 4)``, by math.comb); the block's run alone is tests/test_docs_links.py's."""
    import math

    block = next(block for block in re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)
                 if "pass_at_k(8, 3, 4)" in block)
    claim = re.search(r"# (\d+) x ceil\(([\d.]+) \* (\d+)\) = (\d+)", block)
    assert claim, "the README's selected-count comment changed: update this test"
    rows, ratio, length, total = int(claim[1]), float(claim[2]), int(claim[3]), int(claim[4])
    assert rows * math.ceil(ratio * length) == total
    exec(compile(block, "README.md library block", "exec"), {"__name__": "readme_snippet"})
    count, passed = capsys.readouterr().out.splitlines()
    assert count == f"{total} of {rows * length} tokens selected"
    assert math.isclose(float(passed), 1 - math.comb(8 - 3, 4) / math.comb(8, 4), rel_tol=1e-12)


def test_the_probability_shifts_docs_evaluation_quotes_for_a_dtype_and_a_batch_change():
    """docs/evaluation.md explains why a resume compares the resolved dtype but accepts another
    --batch-size by how far each moves a tiny model's next-token probabilities. It said "~1e5
    times a batch change's"; the tests' tiny models (seeds 0-4) give 2.5e4 to 7e4
    (/tmp/s57/e/dtype_vs_batch.py). The doc now quotes the two shifts: on the tiny model (seed 0)
    each is within a factor sqrt(10) of it (the padding's, a float32 rounding, at most that)."""
    import torch
    from conftest import build_tiny_model, build_tiny_tokenizer

    quoted = re.search(r"a tiny model's next-token probabilities move ~([\de.-]+) from fp32 to bf16, "
                       r"~([\de.-]+) with another batch's padding", flat("docs/evaluation.md"))
    assert quoted, "docs/evaluation.md's dtype sentence changed: update this test"
    tokenizer = build_tiny_tokenizer()
    tokenizer.padding_side = "left"  # as ict eval's batches
    model = build_tiny_model(len(tokenizer)).eval()
    prompts = ["what is 1 + 2 ?", "what is 4 + 4 ?", "so it is 3", "the sum is"]

    def probabilities(texts: list[str], dtype: torch.dtype) -> torch.Tensor:
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            return torch.softmax(model.to(dtype)(**batch).logits[:, -1].double(), dim=-1)

    alone = torch.cat([probabilities([prompt], torch.float32) for prompt in prompts])
    padded = probabilities([*prompts, "what is 9 - 2 ? the sum is 3 and so it is 7 8 8"], torch.float32)[:4]
    bf16 = torch.cat([probabilities([prompt], torch.bfloat16) for prompt in prompts])
    dtype_shift, batch_shift = (bf16 - alone).abs().max().item(), (padded - alone).abs().max().item()
    assert float(quoted[1]) / 10**0.5 <= dtype_shift <= float(quoted[1]) * 10**0.5, dtype_shift
    assert batch_shift <= float(quoted[2]) * 10**0.5, batch_shift


def test_the_kv_cache_tokens_docs_scaling_quotes_for_a_gib_are_the_offline_defaults():
    """docs/scaling.md (and ict.models.vllm_backend's comment): 1 GiB of vLLM's CPU KV cache holds
    ~23,000 tokens of the offline default in fp32: K and V, per layer and key-value head, head_dim
    float32 values a token (the converted model's config; skipped where it is not converted)."""
    import json

    from ict.models.loading import OFFLINE_DEFAULT_MODEL, cache_root

    quoted = re.search(r"1 GiB holds ~([\d,]+) tokens of the offline default in fp32", flat("docs/scaling.md"))
    assert quoted, "docs/scaling.md's KV cache sentence changed: update this test"
    path = cache_root() / OFFLINE_DEFAULT_MODEL / "config.json"
    if not path.is_file():
        pytest.skip(f"the offline default is not converted here ({path})")
    config = json.loads(path.read_text())
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    per_token = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * head_dim * 4
    assert abs(2**30 / per_token / int(quoted[1].replace(",", "")) - 1) < 0.05, 2**30 / per_token


def test_the_draws_docs_evaluation_says_training_shares_with_an_rg_set_are_reasoning_gyms():
    """docs/evaluation.md: problem i of a reasoning-gym set of seed s is the draw s + i, so
    `ict train --seed s` (draws s .. s + dataset_size - 1) and an `rg:` evaluation set (seed
    1_000_003) share draws, question for question, once s + dataset_size > 1_000_003. The docs said
    before that training seeds below 1_000_000 kept them apart: `--seed 999999` trains on all 200
    (4-term sums of 4-digit numbers here, so that no two draws ask one question by chance)."""
    from ict.data.benchmark_names import REASONING_GYM_DEFAULT_SIZE, REASONING_GYM_EVAL_SEED
    from ict.data.benchmarks import load_benchmark
    from ict.data.training_data import load_training_data
    from ict.training.config import TrainConfig

    evaluation = flat("docs/evaluation.md")
    assert (f"other draws than an evaluation set's while `s + dataset_size <= {REASONING_GYM_EVAL_SEED:_}`"
            in evaluation), "docs/evaluation.md's sentence on the draws changed: update this test"
    quoted = re.search(r"at `--seed (\d+)` the ([\d,]+) draws hold all (\d+) of `size=\d+` again", evaluation)
    assert quoted, "docs/evaluation.md's example seed changed: update this test"
    seed, draws, held = int(quoted[1]), int(quoted[2].replace(",", "")), int(quoted[3])
    assert (draws, held) == (TrainConfig.dataset_size, REASONING_GYM_DEFAULT_SIZE)
    assert seed <= REASONING_GYM_EVAL_SEED and REASONING_GYM_EVAL_SEED + held <= seed + draws
    assert seed < 1_000_000  # what the docs called a training seed before

    task = {"min_terms": 4, "max_terms": 4, "min_digits": 4, "max_digits": 4}
    name = "rg:chain_sum:" + ":".join(f"{key}={value}" for key, value in task.items()) + ":size=3"
    questions = [problem.question for problem in load_benchmark(name).problems]
    size = 5
    for start, shared in ((REASONING_GYM_EVAL_SEED - size, []),            # draws ..., 1_000_002
                          (REASONING_GYM_EVAL_SEED - size + 2, [(3, 0), (4, 1)])):  # ..., 1_000_004
        train = load_training_data("chain_sum", dataset_config=task, dataset_size=size, seed=start).train
        trained = [problem.prompt for problem in train]
        assert [(i, j) for i, text in enumerate(trained) for j, question in enumerate(questions)
                if text == question] == shared, start


def test_the_fields_of_a_samples_record_docs_evaluation_lists_are_the_ones_ict_eval_writes():
    """docs/evaluation.md's list of a samples.jsonl record's fields left out `grading` and `chunk`,
    which every record of `ict eval` carries (a resume reads both): the list, and the grading
    settings it names, are those of `records_for_problem`'s records."""
    from ict.answers.grading import Verdict
    from ict.core.problems import Problem
    from ict.evaluation.records import GRADING_KEYS, records_for_problem

    listed = re.search(r"`samples.jsonl`: one line per completion: (.*?); \* `results.json`",
                       flat("docs/evaluation.md"))
    assert listed, "docs/evaluation.md's samples.jsonl sentence changed: update this test"
    text = re.sub(r"\([^()]*(?:\([^()]*\)[^()]*)*\)", "", listed[1])  # the parenthesised remarks out
    fields = [field.strip().replace("extracted answer", "extracted") for field in text.split(",")]
    grading = re.search(r"grading \(the settings its verdict was graded with: ([^)]*)\)", listed[1])
    problem = Problem("2 + 2 =", "4", "math", benchmark="gsm8k", index=0, problem_id="0")
    record, = records_for_problem(problem, ["4"], [1], [True], [Verdict(True, "4", "ok", 1.0)], greedy=False,
                                  seed=0, grading={key: None for key in GRADING_KEYS}, chunk=(0, 1, 8))
    assert fields == list(record), (fields, list(record))
    assert grading and re.findall(r"`(\w+)`", grading[1]) == list(GRADING_KEYS)
