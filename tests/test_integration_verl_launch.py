"""ict.integrations.verl with verl 0.9's v1 trainer and launch path, on CPU: verl's own
``PPOTrainer._balance_batch`` (wrapped by ict) keeps whole groups on each rank, and the example
launch script's overrides compose with verl's ``ppo_trainer`` config into our policy-loss config.
The loss inside verl's data path: tests/test_integration_verl.py; skipped where verl 0.9 is not
importable (tests/verl_helpers.py)."""

from __future__ import annotations

import os
import subprocess
import warnings
from types import SimpleNamespace

import pytest
from verl_helpers import LAUNCH_SCRIPT, ict_verl, launch_config

from ict.core.errors import UsageError
from ict.integrations import parse_token_selector


def _v1_trainer(trainer_base, loss_mode: str, selector: str, mini_batch: int = 2):
    """verl v1's PPOTrainer state that ``_balance_batch`` reads: 2 data-parallel ranks, G=2."""
    import types

    from omegaconf import OmegaConf

    config = OmegaConf.create({
        "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": mini_batch, "policy_loss": {
            "loss_mode": loss_mode, "ict_selector": selector}}, "rollout": {"n": 2}},
        "trainer": {"critic_warmup": 0}})
    trainer = SimpleNamespace(config=config, use_critic=False, global_steps=1, tokenizer=SimpleNamespace(eos_token_id=0),
                              actor_rollout_wg=SimpleNamespace(_dispatch_info={"actor": [0, 1]}))
    trainer._get_required_batch_multiple = types.MethodType(trainer_base.PPOTrainer._get_required_batch_multiple, trainer)
    return trainer



def test_v1_balance_keeps_whole_groups_on_each_rank() -> None:
    """verl v1's own ``PPOTrainer._balance_batch`` (ict wraps it): for a group selector each
    rank's contiguous share is whole groups, as balanced as whole groups allow (brute force over
    all splits, verl's workload 24576 s + s^2); for verl's own loss it still balances single
    sequences, which splits groups (why group_mean needs the wrapper)."""
    trainer_base = pytest.importorskip(
        "verl.trainer.ppo.v1.trainer_base",
        reason="verl's v1 trainer imports transfer_queue (verl's verl-core extra); docs/scaling.md, section verl")
    from transfer_queue import KVBatchMeta

    seq_len = {"a": 100, "b": 90, "c": 20, "d": 10}
    keys = [f"{uid}_{session}_0" for uid in "cadb" for session in range(2)]

    def balanced(loss_mode: str, selector: str) -> tuple[list[str], dict]:
        batch = KVBatchMeta(keys=list(keys), tags=[{"seq_len": seq_len[key[0]]} for key in keys], partition_id="train")
        metrics: dict = {}
        trainer_base.PPOTrainer._balance_batch(_v1_trainer(trainer_base, loss_mode, selector), batch, metrics)
        return [key[0] for key in batch.keys], metrics

    def workload(uids: list[str]) -> int:
        return sum(24576 * seq_len[uid] + seq_len[uid] ** 2 for uid in uids)

    for selector in ["ict:ratio=0.1", "ict:reference=group_mean,ratio=0.1",
                     "ict:reference=seq_mean,scope=group", "random:scope=group"]:
        uids, metrics = balanced("ict", selector)
        ranks = [uids[:4], uids[4:]]
        assert set(ranks[0]).isdisjoint(ranks[1]) and all(a == b for a, b in zip(uids[::2], uids[1::2])), uids
        best = min(max(workload(2 * pair), workload(2 * [u for u in "abcd" if u not in pair]))
                   for pair in [("a", "b"), ("a", "c"), ("a", "d")])
        assert max(workload(rank) for rank in ranks) == best
        assert "global_seqlen/min" in metrics
    uids, _ = balanced("vanilla", "all")
    assert not set(uids[:4]).isdisjoint(uids[4:])  # verl's sequence balancing splits a group
    uids, _ = balanced("ict", "entropy:ratio=0.2")  # no group statistics: verl's balancing
    assert not set(uids[:4]).isdisjoint(uids[4:])
    with pytest.raises(UsageError, match="ppo_mini_batch_size .1. a multiple of the 2 data-parallel ranks"):
        batch = KVBatchMeta(keys=list(keys), tags=[{"seq_len": 1} for _ in keys], partition_id="train")
        trainer_base.PPOTrainer._balance_batch(_v1_trainer(trainer_base, "ict", "ict", mini_batch=1), batch, {})
    with pytest.raises(UsageError, match="prompt count divisible by the 2 data-parallel ranks; got 3 prompts"):
        ict_verl.group_balanced_order(list("aabbcc"), [1] * 6, 2, 2)



def test_v1_balance_reads_uids_with_underscores() -> None:
    """v1's keys are ``{uid}_{session}_{index}``; a dataset's own uid may hold underscores
    ("gsm8k_1"): the group is everything before the last two fields."""
    trainer_base = pytest.importorskip(
        "verl.trainer.ppo.v1.trainer_base",
        reason="verl's v1 trainer imports transfer_queue (verl's verl-core extra); docs/scaling.md, section verl")
    from transfer_queue import KVBatchMeta

    keys = [f"gsm8k_{prompt}_{session}_0" for prompt in (1, 2) for session in range(2)]
    batch = KVBatchMeta(keys=list(keys), tags=[{"seq_len": 10 + row} for row in range(4)], partition_id="train")
    trainer_base.PPOTrainer._balance_batch(_v1_trainer(trainer_base, "ict", "ict"), batch, {})
    prompts = [key.rsplit("_", 2)[0] for key in batch.keys]
    assert sorted(prompts) == ["gsm8k_1", "gsm8k_1", "gsm8k_2", "gsm8k_2"]
    assert prompts[0] == prompts[1] and prompts[2] == prompts[3]  # each rank's share is one whole group


METHODS = {"grpo": "all", "entropy": "entropy", "stapo": "stapo", "ict": "ict", "random": "random",
           "kl_cov": "kl_cov", "clip_cov": "clip_cov"}



@pytest.mark.parametrize("method", list(METHODS))
def test_launch_script_builds_our_config_in_verl(method: str) -> None:
    """The example's overrides compose with verl's own ppo_trainer config, and the actor config
    the workers build from it carries our policy-loss config and selector."""
    from verl.utils.config import omega_conf_to_dataclass

    config = launch_config(method)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    assert isinstance(actor.policy_loss, ict_verl.ICTPolicyLossConfig)
    assert actor.policy_loss.loss_mode == "ict"
    assert parse_token_selector(actor.policy_loss.ict_selector)[0] == METHODS[method]
    assert actor.ppo_micro_batch_size_per_gpu % actor.rollout_n == 0 and not actor.use_dynamic_bsz
    assert actor.rollout_n == 8
    # verl's default (v1) trainer, with ict loaded in every Ray process (its balancing wrapped)
    assert config.trainer.use_v1 is True
    assert config.ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES == "ict.integrations.verl"
    assert f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES={ict_verl.__name__}" == ict_verl.V1_OVERRIDE



ACTOR = "actor_rollout_ref.actor."


@pytest.mark.parametrize(("overrides", "message"), [
    ((f"{ACTOR}loss_agg_mode=token-sum", f"+{ACTOR}policy_loss.ict_aggregation=loss_agg_mode"),
     "loss_mode=ict supports loss_agg_mode token-mean, seq-mean-token-mean, seq-mean-token-sum-norm; "
     "got 'token-sum'"),
    ((f"{ACTOR}loss_agg_mode=seq-mean-token-sum", f"+{ACTOR}policy_loss.ict_aggregation=loss_agg_mode"),
     "got 'seq-mean-token-sum'"),
    ((f"{ACTOR}clip_ratio_c=0.5", f"+{ACTOR}policy_loss.ict_dual_clip=true"),
     "clip_ratio_c must be > 1 (or None), got 0.5"),
    ((f"{ACTOR}clip_ratio_low=1.5",), "clip_ratio(_low/_high), clip_ratio_c or loss_scale_factor: need 0 <= clip_low < 1"),
    ((f"{ACTOR}clip_ratio_high=-0.1",), "got 0.2, -0.1"),
    ((f"{ACTOR}loss_scale_factor=0",), "max_response_length must be >= 1 (or None), got 0"),
    (("actor_rollout_ref.model.use_fused_kernels=true",), ict_verl.FUSED_KERNELS_REFUSAL),
    ((f"{ACTOR}ulysses_sequence_parallel_size=2",), ict_verl.ULYSSES_REFUSAL),
])
def test_launch_validation_refuses_what_icts_hook_and_loss_cannot_take(overrides, message) -> None:
    """verl's own launch check (validate_config, before Ray starts or a model loads) refuses, in
    one line, the actor loss settings the loss would otherwise refuse at the first training step
    (as it does fused kernels and Ulysses, which the engine hook would meet there)."""
    from verl.utils.config import validate_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UsageError) as error:
            validate_config(launch_config("ict", *overrides), use_reference_policy=False, use_critic=False)
    assert message in str(error.value) and "\n" not in str(error.value)


def test_launch_validation_refuses_clip_cov_beside_the_dual_clip() -> None:
    """METHOD=clip_cov with ict_dual_clip: refused before Ray starts (the dual clip zeroes the
    gradient of tokens Clip-Cov would spend its cuts on); METHOD=clip_cov alone is accepted."""
    from verl.utils.config import validate_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(UsageError, match="ict_selector 'clip_cov' spares the tokens") as error:
            validate_config(launch_config("clip_cov", f"+{ACTOR}policy_loss.ict_dual_clip=true"),
                            use_reference_policy=False, use_critic=False)
        assert "\n" not in str(error.value)
        validate_config(launch_config("clip_cov"), use_reference_policy=False, use_critic=False)


@pytest.mark.parametrize(("override", "message"), [
    (f"{ACTOR}policy_loss.ict_selector=null", "ict_selector must be a string"),
    (f"+{ACTOR}policy_loss.ict_aggregation=foo", "ict_aggregation must be none, loss_agg_mode or one of"),
    (f"+{ACTOR}policy_loss.ict_full_token_warmup_steps=-1", "ict_full_token_warmup_steps must be null or"),
    (f"+{ACTOR}policy_loss.ict_seed=1.5", "ict_seed must be an integer, got 1.5"),
    (f"+{ACTOR}policy_loss.ict_dual_clip=no", "ict_dual_clip must be true or false, got 'no'"),
    (f"{ACTOR}policy_loss.ict_selector='ict:reference=ref'", "the 'ref' JS reference is not supported"),
    (f"+{ACTOR}policy_loss.ict_stats_tile_size=bad", "ict_stats_tile_size: tile size must be"),
    (f"+{ACTOR}policy_loss.ict_denominator=foo", "ict_denominator must be 'selected' or 'all'"),
])
def test_launch_validation_refuses_a_bad_policy_loss_field(override: str, message: str) -> None:
    """A bad ICTPolicyLossConfig field is refused by verl's launch check (before Ray starts),
    where hydra instantiates the config: hydra wraps our one-line UsageError in its
    InstantiationException, which ``python -m verl.trainer.main_ppo`` prints compactly (no
    traceback, exit 1) as ``Error in call to target ...``, ``UsageError('<ours>')`` and the
    ``full_key``. ict cannot unwrap it there: verl's launch process imports ict only when hydra
    resolves this ``_target_``, inside the failing call."""
    from hydra.errors import InstantiationException
    from verl.utils.config import validate_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(InstantiationException) as error:
            validate_config(launch_config("ict", override), use_reference_policy=False, use_critic=False)
    cause = error.value.__cause__
    assert isinstance(cause, UsageError) and str(cause).startswith(message) and "\n" not in str(cause)
    assert str(error.value).splitlines() == [
        "Error in call to target 'ict.integrations.verl.ICTPolicyLossConfig':", repr(cause),
        "full_key: actor_rollout_ref.actor.policy_loss"]


@pytest.mark.parametrize("overrides", [
    (),
    (f"{ACTOR}loss_agg_mode=token-sum",),  # ict's own aggregation does not read it
    (f"{ACTOR}clip_ratio_c=0.5",),  # read only under ict_dual_clip
    (f"{ACTOR}loss_agg_mode=seq-mean-token-sum-norm", f"+{ACTOR}policy_loss.ict_aggregation=loss_agg_mode",
     f"{ACTOR}loss_scale_factor=4096", f"+{ACTOR}policy_loss.ict_dual_clip=true"),
])
def test_launch_validation_accepts_loss_settings_icts_loss_takes(overrides) -> None:
    from verl.utils.config import validate_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        validate_config(launch_config("ict", *overrides), use_reference_policy=False, use_critic=False)


def test_launch_script_refuses_unknown_method() -> None:
    result = subprocess.run(["bash", str(LAUNCH_SCRIPT)], env={"PATH": os.environ.get("PATH", ""), "HOME": "/tmp", "METHOD": "foo"},
                            capture_output=True, text=True)
    assert result.returncode == 2 and "METHOD must be one of" in result.stderr


@pytest.mark.parametrize(("name", "value"), [("N_GPUS", "0"), ("MICRO", "0"), ("N_GPUS", "eight"),
                                           ("ROLLOUT_N", "-8"), ("MINI_BATCH", "08"), ("EPOCHS", "x")])
def test_launch_script_refuses_a_size_that_is_no_positive_integer(name: str, value: str) -> None:
    """N_GPUS=0 or MICRO=0 was a bash "division by 0" inside the batch-size check, which then let
    the script go on (exit 0: verl launched with n_gpus_per_node=0); ROLLOUT_N=-8 passed it."""
    result = subprocess.run(["bash", str(LAUNCH_SCRIPT)], capture_output=True, text=True,
                            env={"PATH": os.environ.get("PATH", ""), "HOME": "/tmp", "DRY_RUN": "1", name: value})
    assert (result.returncode, result.stderr, result.stdout) == (
        2, f"{name} must be a positive integer, got '{value}'\n", "")


def test_group_balanced_order_gives_each_rank_as_many_whole_groups() -> None:
    """v1 hands rank r the r-th of dp equal contiguous shares, so each rank must get the same
    number of whole groups even where an unequal split balances better (lengths 100 against
    40 + 30 + 30): 2 groups a rank, the best of those splits by verl's workload. A prompt with other than rollout.n rows (padded or
    filtered batches) is refused in one line."""
    uids = [uid for uid in "abcd" for _ in range(2)]
    lengths = {"a": 100, "b": 40, "c": 30, "d": 30}
    order = ict_verl.group_balanced_order(uids, [lengths[uid] for uid in uids], 2, 2)
    assert sorted(order) == list(range(8))
    shares = [[uids[row] for row in order[:4]], [uids[row] for row in order[4:]]]
    for share in shares:  # whole groups, two per rank
        assert len(set(share)) == 2 and all(share.count(uid) == 2 for uid in share), shares
    assert set(shares[0]).isdisjoint(shares[1])

    def workload(share: list[str]) -> int:  # verl's calculate_workload: 24576 s + s^2 per row
        return sum(24576 * lengths[uid] + lengths[uid] ** 2 for uid in share)

    best = min(max(workload(2 * [first, other]), workload(2 * [uid for uid in "bcd" if uid != other]))
               for first, other in [("a", "b"), ("a", "c"), ("a", "d")])
    assert max(workload(share) for share in shares) == best  # {a, c} / {b, d}, not {a, b} / {c, d}
    with pytest.raises(UsageError, match=r"need rollout.n=2 rows per prompt .* got 2 prompts with \[1, 3\] rows") as error:
        ict_verl.group_balanced_order(list("abbb"), [1] * 4, 2, 2)
    assert "\n" not in str(error.value)


def test_group_balanced_order_weighs_a_group_by_all_its_rows() -> None:
    """A group's workload is the sum over its rows of verl's calculate_workload (24576 s + s^2),
    not its longest row's: groups a and d hold two 100-token rows, b and c one 100-token and one
    10-token row; by the longest row all four weigh alike, by the sum each rank gets one heavy
    and one light group (equal loads)."""
    uids = [uid for uid in "abcd" for _ in range(2)]
    lengths = [100, 100, 100, 10, 100, 10, 100, 100]
    order = ict_verl.group_balanced_order(uids, lengths, 2, 2)

    def load(rows: list[int]) -> int:
        return sum(24576 * lengths[row] + lengths[row] ** 2 for row in rows)

    assert {frozenset(uids[row] for row in order[:4]), frozenset(uids[row] for row in order[4:])} in (
        {frozenset("ab"), frozenset("cd")}, {frozenset("ac"), frozenset("bd")})
    assert load(order[:4]) == load(order[4:])


def test_actor_refusal_returns_the_loss_settings_refusal() -> None:
    """actor_refusal returns its refusal (None: none), for the wrapped validate to raise."""
    from verl.utils.config import omega_conf_to_dataclass

    overrides = (f"{ACTOR}loss_agg_mode=token-sum", f"+{ACTOR}policy_loss.ict_aggregation=loss_agg_mode")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bad, good = (omega_conf_to_dataclass(launch_config("ict", *extra).actor_rollout_ref.actor)
                     for extra in (overrides, ()))
    assert ict_verl.actor_refusal(bad, None) == ("loss_mode=ict supports loss_agg_mode token-mean, "
                                                "seq-mean-token-mean, seq-mean-token-sum-norm; got 'token-sum'")
    assert ict_verl.actor_refusal(good, None) is None
