"""`pack_rollout`'s layout, the EOS cut of a generated row and the sampler's greedy switch, against
tensors and values written out by hand (the layout of `RolloutBatch`'s docstring: prompts
left-padded to P, responses right-padded to T, the EOS kept as a response token)."""

from __future__ import annotations

import torch

from ict.models.rollout import Rollout, SamplingSettings, pack_rollout, truncate_at_eos

PAD = 0


def _rollout(prompt_ids: list[list[int]], completion_ids: list[list[list[int]]]) -> Rollout:
    return Rollout(prompt_texts=[""] * len(prompt_ids), prompt_ids=prompt_ids,
                   completions=[[""] * len(group) for group in completion_ids],
                   completion_ids=completion_ids,
                   finished=[[bool(ids) and ids[-1] == 1 for ids in group] for group in completion_ids])


def test_pack_rollout_by_hand():
    """2 prompts x 2 samples, ragged prompts (2 and 1 tokens) and responses (3, 1, 0, 2 tokens;
    the first ends with EOS id 1): P = 2, T = 3, rows prompt-major."""
    batch = pack_rollout(_rollout([[5, 6], [7]], [[[10, 11, 1], [12]], [[], [13, 14]]]), PAD)
    assert batch.prompt_length == 2
    assert batch.input_ids.tolist() == [[5, 6, 10, 11, 1],
                                        [5, 6, 12, 0, 0],
                                        [0, 7, 0, 0, 0],
                                        [0, 7, 13, 14, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1],
                                             [1, 1, 1, 0, 0],
                                             [0, 1, 0, 0, 0],
                                             [0, 1, 1, 1, 0]]
    assert batch.response_ids.tolist() == [[10, 11, 1], [12, 0, 0], [0, 0, 0], [13, 14, 0]]
    assert batch.response_mask.tolist() == [[True, True, True], [True, False, False],
                                            [False, False, False], [True, True, False]]
    assert batch.response_mask.dtype == torch.bool


def test_pack_rollout_of_empty_responses_keeps_one_masked_column():
    batch = pack_rollout(_rollout([[3, 4, 5]], [[[], []]]), PAD)
    assert batch.input_ids.tolist() == [[3, 4, 5, 0], [3, 4, 5, 0]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 0]]
    assert batch.response_mask.tolist() == [[False], [False]]


def test_a_row_is_cut_at_its_first_eos():
    """Every completion stops at the first EOS (kept); later tokens are `generate`'s padding."""
    assert truncate_at_eos([5, 1, 6, 1], [1]) == ([5, 1], True)
    assert truncate_at_eos([5, 2, 6, 1], [1, 2]) == ([5, 2], True)
    assert truncate_at_eos([1, 1], [1]) == ([1], True)


def test_temperature_zero_is_greedy():
    """The docstring's rule: ``greedy`` or a temperature <= 0 decodes by argmax."""
    assert SamplingSettings(0.0, 8).generate_kwargs() == {"do_sample": False}
    assert SamplingSettings(-1.0, 8).is_greedy and SamplingSettings(0.7, 8, greedy=True).is_greedy
    assert SamplingSettings(0.7, 8, top_p=0.9).generate_kwargs() == {
        "do_sample": True, "temperature": 0.7, "top_p": 0.9, "top_k": 0}
