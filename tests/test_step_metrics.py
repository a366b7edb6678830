"""The numbers of a training step's metrics line (`ict.training.step_metrics`) against values worked
out by hand: reward mean / std / accuracy, lengths, the token-weighted combination of
micro-batches, the mean loss and gradient norm, and the entropy warnings' strict thresholds."""

from __future__ import annotations

import math

import pytest
import torch
from rich.console import Console

from ict.core.errors import UsageError
from ict.models.rollout import Rollout
from ict.training.config import TrainConfig
from ict.training.step import BatchUpdates
from ict.training.step_metrics import check_entropy, length_metrics, reward_metrics, update_metrics


def test_reward_metrics_by_hand():
    """Mean 0.5; sample std (n - 1 = 3): sqrt((0.25 + 0 + 0.25 + 0) / 3) = 0.408248; accuracy =
    the share of task rewards >= 1 (a partial 0.5 is not correct): 2 / 4. One completion: std 0."""
    metrics = reward_metrics(torch.tensor([1.0, 0.5, 0.0, 0.5]), [1.0, 0.5, 0.0, 1.0])
    assert metrics["reward_mean"] == pytest.approx(0.5)
    assert metrics["reward_std"] == pytest.approx(math.sqrt(0.5 / 3))
    assert metrics["accuracy"] == 0.5
    assert reward_metrics(torch.tensor([0.7]), [0.7]) == {"reward_mean": pytest.approx(0.7),
                                                          "reward_std": 0.0, "accuracy": 0.0}


def test_length_metrics_by_hand():
    """Lengths 3, 1, 2, 0 (mean 1.5); three of four finished."""
    rollout = Rollout(prompt_texts=["a", "b"], prompt_ids=[[1], [2]], completions=[["", ""], ["", ""]],
                      completion_ids=[[[1, 2, 3], [4]], [[5, 6], []]], finished=[[True, True], [True, False]])
    assert length_metrics(rollout) == {"response_length_mean": 1.5, "finished_fraction": 0.75,
                                       "truncated_fraction": 0.25}


def test_update_metrics_weigh_micro_batches_by_their_tokens():
    """Two micro-batches: 4 response tokens (1 selected) with entropy 2.0 and selected entropy 3.0,
    6 (3 selected) with 1.0 and 0.5. Token means: entropy (4 * 2 + 6 * 1) / 10 = 1.4, selected
    entropy (1 * 3 + 3 * 0.5) / 4 = 1.125, selected fraction 4 / 10. The loss and the gradient norm
    are the means of the applied updates' (`BatchUpdates` keeps a skipped update in neither)."""
    updates = BatchUpdates()
    updates.totals.add({"entropy": 2.0, "entropy_selected": 3.0}, 4.0, 1.0)
    updates.totals.add({"entropy": 1.0, "entropy_selected": 0.5}, 6.0, 3.0)
    updates.losses.extend([1.0, 3.0])
    updates.grad_norms.extend([2.0, 4.0])
    metrics = update_metrics(updates)
    assert metrics["entropy"] == pytest.approx(1.4)
    assert metrics["entropy_selected"] == pytest.approx(1.125)
    assert metrics["selected_fraction"] == pytest.approx(0.4)
    assert (metrics["loss"], metrics["grad_norm"]) == (2.0, 3.0)


def test_entropy_warnings_need_a_strict_crossing():
    """Collapse: entropy < 0.5 x initial; explosion: > 2 x initial. Exactly at either bound is
    neither (initial 1.0, then 0.5 and 2.0 warn nothing; 0.49 and 2.01 do)."""
    config = TrainConfig(entropy_collapse_fraction=0.5, entropy_explosion_factor=2.0)
    console = Console(record=True, width=200)
    state: dict = {"initial_entropy": None, "warned": []}
    fired = []
    for step, entropy in enumerate([1.0, 0.5, 2.0, 0.49, 2.01], 1):
        metrics = {"step": step, "entropy": entropy}
        state = check_entropy(metrics, state, config, console)
        fired.append(metrics["entropy_warning"])
    assert fired == [None, None, None, "collapse", "explosion"]
    assert state["initial_entropy"] == 1.0


def test_no_accepted_warning_threshold_warns_at_the_first_step():
    """The first step's entropy is the initial one, so no warning fires there for any setting
    `validate` accepts (its ends: collapse fraction 1, explosion factor 1); 1.5 and 0.5 warned
    "collapse" / "explosion" at step 1 of every run, and are refused."""
    for fraction, factor in [(0.0, 1.0), (1.0, 1.0), (0.1, 3.0), (1.0, 1e9)]:
        config = TrainConfig(entropy_collapse_fraction=fraction, entropy_explosion_factor=factor).validate()
        for entropy in (1e-3, 1.2, 7.5):
            metrics = {"step": 1, "entropy": entropy}
            check_entropy(metrics, {"initial_entropy": None, "warned": []}, config, Console(record=True))
            assert metrics["entropy_warning"] is None, (fraction, factor, entropy)
    for fraction, factor in [(1.5, 3.0), (0.1, 0.5)]:
        with pytest.raises(UsageError, match="^entropy_"):
            TrainConfig(entropy_collapse_fraction=fraction, entropy_explosion_factor=factor).validate()


def test_the_step_entropy_is_the_mean_over_response_tokens_at_any_micro_batch_size(tiny_tokenizer):
    """`accumulate_gradients`' totals weigh each micro-batch by its response tokens (ragged rows of
    2-8 tokens, padded to 8): the step's entropy is the mean over every response token, here
    against each row run alone and unpadded (float64 entropy of its softmax), and the selected
    fraction is ceil(0.2 N) / N of the batch-ranked 20-Entropy."""
    from conftest import build_tiny_model
    from train_helpers import accumulate, grouped_batch_and_advantages

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    entropies = []
    with torch.no_grad():
        for row in range(batch.input_ids.shape[0]):
            tokens = batch.input_ids[row][batch.attention_mask[row].bool()]
            length = int(batch.response_mask[row].sum())
            probs = model(input_ids=tokens.unsqueeze(0)).logits[0, -length - 1:-1].double().softmax(-1)
            entropies.append(-(probs * probs.log()).sum(-1))
    expected = float(torch.cat(entropies).mean())
    tokens = int(batch.response_mask.sum())
    assert tokens < batch.response_mask.numel()  # padding present: a mean over all positions differs
    for micro in (2, 16):
        updates = BatchUpdates()
        updates.totals.merge(accumulate(model, batch, advantages, "entropy", {"ratio": 0.2}, micro,
                                        group_size=4).totals)
        metrics = update_metrics(updates)
        assert metrics["entropy"] == pytest.approx(expected, rel=1e-4), micro
        assert metrics["selected_fraction"] == pytest.approx(math.ceil(round(0.2 * tokens, 9)) / tokens), micro


def test_the_step_loss_is_the_token_mean_over_the_whole_mini_batch(tiny_tokenizer):
    """At ratio 1 (no old log-probs) GRPO's clipped surrogate is -A on every token, so the
    token-mean loss of the mini-batch is -sum_i A_i |y_i| / sum_i |y_i|: the micro-batches' losses
    must be combined by their token counts, not averaged (rows of 2-8 tokens)."""
    from conftest import build_tiny_model
    from train_helpers import accumulate, grouped_batch_and_advantages

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    lengths = batch.response_mask.sum(dim=1).double()
    expected = float(-(advantages.double() * lengths).sum() / lengths.sum())
    for micro in (1, 4, 16):
        model.zero_grad(set_to_none=True)
        result = accumulate(model, batch, advantages, "all", {}, micro, group_size=4)
        assert result.loss == pytest.approx(expected, rel=1e-5, abs=1e-7), micro


def test_the_first_pass_over_a_batch_holds_each_row_once(tiny_tokenizer):
    """16 rows in mini-batches of 8, two passes: the step's diagnostics read the first pass, the
    first two mini-batches, which hold every row exactly once."""
    from conftest import build_tiny_model
    from train_helpers import grouped_batch_and_advantages

    from ict.core.loss import PolicyLossConfig
    from ict.training.step import Method, StepContext, update_on_batch

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    config = TrainConfig(prompts_per_step=4, num_generations=4, mini_batch_size=8, updates_per_batch=2,
                         seed=3, method="grpo", max_new_tokens=8)
    updates = update_on_batch(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, advantages,
                              Method.of("all", {}), StepContext(PolicyLossConfig(), 1.0), config, step=0,
                              state={})
    assert len(updates.losses) == 4 and len(updates.first_pass) == 2
    rows = torch.cat([index for index, _ in updates.first_pass]).tolist()
    assert sorted(rows) == list(range(16))
    assert all(len(index) == 8 and len(set((index // 4).tolist())) == 2 for index, _ in updates.first_pass)


def test_the_first_update_of_a_reused_batch_takes_its_own_log_probs_as_old(tiny_tokenizer, monkeypatch):
    """`update_on_batch`'s docstring: the first update's old log-probs are its own detached ones
    (ratio 1), the scoring pass's serve the later updates. The scoring pass is shifted by +0.3 here,
    so taking them first would give ratio exp(-0.3); at ratio 1 GRPO's loss of the first mini-batch
    is -sum_i A_i |y_i| / sum_i |y_i| over its rows."""
    import dataclasses

    from conftest import build_tiny_model
    from train_helpers import grouped_batch_and_advantages

    import ict.training.step as step_module
    from ict.core.loss import PolicyLossConfig

    original = step_module.initial_scores

    def shifted(*args, **kwargs):
        stats = original(*args, **kwargs)
        return dataclasses.replace(stats, log_probs=stats.log_probs + 0.3)

    monkeypatch.setattr(step_module, "initial_scores", shifted)
    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    config = TrainConfig(prompts_per_step=4, num_generations=4, mini_batch_size=8, updates_per_batch=2,
                         seed=3, method="grpo", max_new_tokens=8)
    updates = step_module.update_on_batch(
        model, torch.optim.SGD(model.parameters(), lr=0.0), batch, advantages, step_module.Method.of("all", {}),
        step_module.StepContext(PolicyLossConfig(), 1.0), config, step=0, state={})
    first = updates.first_pass[0][0]
    lengths = batch.response_mask[first].sum(dim=1).double()
    expected = float(-(advantages[first].double() * lengths).sum() / lengths.sum())
    assert updates.losses[0] == pytest.approx(expected, rel=1e-5, abs=1e-7)
    second = updates.first_pass[1][0]  # the second mini-batch's old log-probs are the shifted ones
    lengths = batch.response_mask[second].sum(dim=1).double()
    assert updates.losses[1] != pytest.approx(float(-(advantages[second].double() * lengths).sum() / lengths.sum()))


def test_speed_metrics_by_hand():
    """30 generated tokens in a 6 s step of which 2 s generating and 3 s training: 5 tokens/s
    over the step (the docs' 'generated tokens / step wall time'), 15 while generating."""
    from ict.training.step_metrics import speed_metrics

    rollout = Rollout(prompt_texts=["a"], prompt_ids=[[1]], completions=[[""]], completion_ids=[[[2]]],
                      finished=[[True]], generation_seconds=2.0, num_generated_tokens=30)
    assert speed_metrics(rollout, 6.0, 3.0) == {
        "tokens_per_second": 5.0, "generation_tokens_per_second": 15.0, "generation_seconds": 2.0,
        "training_seconds": 3.0, "step_seconds": 6.0}


def test_each_entropy_warning_fires_once():
    """Initial 1.0, collapse below 0.5, explosion above 2.0: each kind warns on its first crossing
    only (`check_entropy`: 'once per kind'), a later crossing of either is silent."""
    config = TrainConfig(entropy_collapse_fraction=0.5, entropy_explosion_factor=2.0)
    console = Console(record=True, width=200)
    state: dict = {"initial_entropy": None, "warned": []}
    fired = []
    for step, entropy in enumerate([1.0, 0.4, 0.3, 2.5, 3.0, 0.2], 1):
        metrics = {"step": step, "entropy": entropy}
        state = check_entropy(metrics, state, config, console)
        fired.append(metrics["entropy_warning"])
    assert fired == [None, "collapse", None, "explosion", None, None]
    assert console.export_text().count("warning: entropy") == 2


def test_the_diagnostics_of_a_shuffled_first_pass_are_those_of_the_batch_in_order(tiny_tokenizer):
    """Mini-batches of 8 rows in a seeded group order (rows 8-15 first here) and one mini-batch of
    16 in order select the same tokens (ICT per group, at lr 0): the step's diagnostics match, each
    row read with its own group and its own finished flag (rows 2 and 15 ended, where ICT selects
    their end tokens); with every token selected the anatomy is that of the rows in order with
    their groups."""
    from types import SimpleNamespace

    from conftest import build_tiny_model
    from train_helpers import grouped_batch_and_advantages

    from ict.core.diagnostics import selection_anatomy
    from ict.core.loss import PolicyLossConfig
    from ict.training.step import Method, StepContext, update_on_batch
    from ict.training.step_metrics import selection_diagnostics

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    rollout = SimpleNamespace(finished=[[False, False, True, False], [False] * 4, [False] * 4, [False] * 3 + [True]])
    diagnostics = []
    by_group = ("ict", {"scope": "group"})
    for method, mini_batch_size in ((("all", {}), 16), (by_group, 8), (by_group, 16)):
        config = TrainConfig(prompts_per_step=4, num_generations=4, mini_batch_size=mini_batch_size, seed=3,
                             method="grpo", max_new_tokens=8)
        updates = update_on_batch(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, advantages,
                                  Method.of(*method), StepContext(PolicyLossConfig(), 1.0), config, 0, {})
        if mini_batch_size == 8:
            assert torch.cat([index for index, _ in updates.first_pass]).tolist()[:4] != [0, 1, 2, 3]
        diagnostics.append(selection_diagnostics(updates, batch, advantages, rollout, 4))
    every, shuffled, ordered = diagnostics
    finished = torch.tensor([done for group in rollout.finished for done in group])
    anatomy = selection_anatomy(batch.response_mask, batch.response_mask, torch.arange(16) // 4, finished,
                                torch.zeros_like(batch.response_mask))
    assert 0 < anatomy["all_partial_group_fraction"] < 1 and 0 < anatomy["all_end_token_fraction"] < 1
    for key, value in anatomy.items():
        assert every[key] == pytest.approx(value, nan_ok=True), key
    assert 0 < ordered["selected_end_token_fraction"] < 1
    assert shuffled.keys() == ordered.keys()
    for key, value in ordered.items():
        if isinstance(value, float):
            assert shuffled[key] == pytest.approx(value, rel=1e-5, abs=1e-7, nan_ok=True), key
        else:
            assert shuffled[key] == value, key


def test_every_token_mean_of_the_step_is_over_its_own_tokens_at_any_micro_batch_size(tiny_tokenizer):
    """Each token-mean metric of a step, against its formula in float64 over the whole batch (one
    unpadded forward per row, temperature 1, old log-probs = current + noise so that ratios move):
    over the response tokens, Renyi-2 ``-log sum_v p_v^2`` and ``kl_old`` (k3: ``exp(d) - d - 1``,
    ``d = old - log p``); over the selected tokens, the clip fraction (the clipped term the smaller:
    ``clip(rho) A < rho A``), ``entropy_selected`` and ``js_score_selected`` (the step's own scores).
    Micro-batches of 1 and 2 rows hold different shares of selected tokens, so weighing a micro-batch's
    mean by the other token count (response for selected, or the reverse) moves every one of them."""
    from conftest import build_tiny_model
    from train_helpers import grouped_batch_and_advantages

    from ict.core.loss import PolicyLossConfig
    from ict.training.step import Method, StepContext, accumulate_gradients

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    response = batch.response_mask.bool()
    log_probs = torch.zeros(response.shape, dtype=torch.float64)
    entropy, renyi2 = torch.zeros_like(log_probs), torch.zeros_like(log_probs)
    with torch.no_grad():
        for row in range(batch.input_ids.shape[0]):
            tokens = batch.input_ids[row][batch.attention_mask[row].bool()]
            length = int(response[row].sum())
            probs = model(input_ids=tokens.unsqueeze(0)).logits[0, -length - 1:-1].double().softmax(-1)
            log_probs[row, :length] = probs.gather(-1, batch.response_ids[row, :length, None]).squeeze(-1).log()
            entropy[row, :length] = -(probs * probs.log()).sum(-1)
            renyi2[row, :length] = -(probs ** 2).sum(-1).log()
    noise = 0.3 * torch.randn(response.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    old = (log_probs + noise).float()
    for micro in (1, 2):
        model.zero_grad(set_to_none=True)
        result = accumulate_gradients(model, batch, advantages, old, Method.of("entropy", {"ratio": 0.3}),
                                      StepContext(PolicyLossConfig(), 1.0), micro_batch_size=micro,
                                      group_size=4, selection_seed=11)
        metrics = update_metrics(BatchUpdates(totals=result.totals))
        selected = result.selected_mask & response
        shares = selected.sum(dim=1).double() / response.sum(dim=1)
        assert shares.max() - shares.min() > 0.3  # rows differ in their selected share
        ratio = torch.exp(log_probs - old.double())
        a = advantages.double()[:, None]
        clipped = ratio.clamp(0.8, 1.28) * a < ratio * a
        d = old.double() - log_probs
        js = result.stats.js_scores[next(iter(result.stats.js_scores))].double()
        expected = {"renyi2": renyi2[response].mean(), "kl_old": (d.exp() - d - 1)[response].mean(),
                    "clip_fraction": clipped[selected].double().mean(),
                    "entropy_selected": entropy[selected].mean(), "js_score_selected": js[selected].mean(),
                    "selected_fraction": selected.sum() / response.sum()}
        assert expected["clip_fraction"] > 0
        for name, value in expected.items():
            assert metrics[name] == pytest.approx(float(value), rel=1e-4, abs=1e-6), (name, micro)


def test_a_top_token_keeps_its_word_start_space_under_a_sentencepiece_decoder():
    """The top-token lists' string of a token id (`token_text`): under a SentencePiece-style
    decoder (Metaspace, as Llama's and Mistral's) a token decoded alone lost its word-start space,
    so '▁the' and 'the' (two tokens) both read 'the', summed as one by the run summary and ict
    compare, and '▁sum' read 'sum' where ict inspect shows ' sum'. Decoded after itself, each keeps
    it (SmolLM2's byte-level labels are all as before: /tmp/s55/j/item5_smollm.py in session 55)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from ict.training.step_metrics import token_text

    backend = Tokenizer(models.BPE(vocab={"<unk>": 0, "▁the": 1, "the": 2, "▁sum": 3, "s": 4}, merges=[],
                                   unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    backend.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    assert tokenizer.decode([1]) == "the"  # the space a decode drops
    assert [token_text(tokenizer, token) for token in (1, 2, 3, 4)] == [" the", "the", " sum", "s"]


def test_tokens_that_decode_alone_to_a_replacement_mark_keep_their_ids_apart(tiny_tokenizer):
    """A token holding part of a character's bytes decodes alone to U+FFFD, the same string for
    every such token (SmolLM2's first byte tokens of ' 😀', ' 日', ' Ω': ' \\ufffd' each), so the
    top-token lists showed several ' \\ufffd' entries, which the run summary and ict compare (they
    add counts up by string) summed as one token. Such a token's string now names its id; the others
    are decoded as before. Every token selected (method all): the selected list is the 10 most
    frequent response ids, counted here with collections.Counter."""
    from collections import Counter
    from types import SimpleNamespace

    from conftest import build_tiny_model
    from train_helpers import grouped_batch_and_advantages

    from ict.core.loss import PolicyLossConfig
    from ict.training.step import Method, StepContext, update_on_batch
    from ict.training.step_metrics import selection_diagnostics

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    rollout = SimpleNamespace(finished=[[False] * 4 for _ in range(4)])
    config = TrainConfig(prompts_per_step=4, num_generations=4, seed=3, method="grpo", max_new_tokens=8)
    updates = update_on_batch(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, advantages,
                              Method.of("all", {}), StepContext(PolicyLossConfig(), 1.0), config, 0, {})
    byte_token = SimpleNamespace(decode=lambda ids: "".join(" \ufffd" if id_ % 2 else f" t{id_}" for id_ in ids))
    diagnostics = selection_diagnostics(updates, batch, advantages, rollout, 4, byte_token)
    counts = Counter(batch.response_ids[batch.response_mask.bool()].tolist())
    top = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:10]
    assert sum(token % 2 for token, _ in top) >= 2  # two byte tokens at least: their strings were alike
    assert diagnostics["top_selected_tokens"] == [[f" \ufffd (id {token})" if token % 2 else f" t{token}", count]
                                                  for token, count in top]
    assert diagnostics["top_unselected_tokens"] == []
    without = selection_diagnostics(updates, batch, advantages, rollout, 4)  # no tokenizer: the ids as text
    assert without["top_selected_tokens"] == [[str(token), count] for token, count in top]
