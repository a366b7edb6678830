"""Settings an engine cannot run with are refused when a run starts, in one line, not after the
model has loaded and the first rollout: verl's launch validation and trainer construction (fused
kernels, Ulysses, rollout importance weights), a vLLM sampling temperature (``ict train``,
``ict eval``), and TRL options changed after ``ICTGRPOConfig``'s checks (before TRL's own
``__init__``, which starts a colocated vLLM engine). The refusals at first use stay as the
backstop (tests/test_integration_verl.py, tests/test_vllm_sync.py)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from ict.core.errors import UsageError

FUSED = "loss_mode=ict needs the actor's logits: set actor_rollout_ref.model.use_fused_kernels=False"
ULYSSES = "loss_mode=ict does not support Ulysses sequence parallelism: set ulysses_sequence_parallel_size=1"
WEIGHTS = "loss_mode=ict does not apply rollout importance weights: disable algorithm.rollout_correction"


def _verl() -> Any:
    """ict's verl integration (skipped where verl 0.9 is not importable)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pytest.importorskip("verl.workers.engine.fsdp.transformer_impl",
                            reason="verl 0.9 is not importable here (docs/scaling.md, section verl)")
        from ict.integrations import verl as ict_verl
    return ict_verl


def _launch_config(*extra: str) -> Any:
    """``verl_helpers.launch_config`` with ``METHOD=ict`` (imported after ``_verl``'s skip: this
    file's other tests run without verl)."""
    from verl_helpers import launch_config

    return launch_config("ict", *extra)


def _validate(config: Any) -> None:
    """verl's launch validation (``main_ppo.main`` runs it before Ray starts)."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        validate_config(config, need_reference_policy(config), need_critic(config))


VANILLA = "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"
REMOVE_PADDING = "actor_rollout_ref.model.use_remove_padding=True"  # verl's own rule for Ulysses


@pytest.mark.parametrize(("settings", "message"), [
    (["actor_rollout_ref.model.use_fused_kernels=True"], FUSED),
    (["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", REMOVE_PADDING], ULYSSES),
    (["actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2", REMOVE_PADDING], ULYSSES),
])
def test_verl_launch_validation_refuses_fused_kernels_and_ulysses(settings: list[str], message: str) -> None:
    """verl's ``validate_config`` (which builds the actor config, so ict is loaded) refused
    neither: loss_mode=ict met them at its first micro-batch, after Ray, the model load and the
    first rollout. Both the actor's Ulysses field and the engine's (which the FSDP engine reads)
    are seen; verl's own losses are not ict's to refuse."""
    _verl()
    _validate(_launch_config())  # the example as it is: accepted
    with pytest.raises(UsageError) as error:
        _validate(_launch_config(*settings))
    assert str(error.value) == message
    _validate(_launch_config(*settings, VANILLA))


CORRECTION = ["algorithm.rollout_correction.rollout_is=token", "actor_rollout_ref.rollout.calculate_log_probs=True"]


def test_verl_trainers_refuse_rollout_importance_weights_when_constructed() -> None:
    """verl's v1 trainer (the default) and v0 trainer compute rollout importance weights with
    ``algorithm.rollout_correction.rollout_is`` set, outside bypass mode, when the rollout records
    its log-probs; ict's loss refused them only in the first loss. Now each trainer's constructor
    refuses them before any worker is built; without any of the three, verl computes no weights
    and the v1 trainer is built as before."""
    from omegaconf import OmegaConf

    _verl()
    trainer_sync = pytest.importorskip("verl.trainer.ppo.v1.trainer_sync",
                                       reason="verl's v1 trainer imports transfer_queue (the verl-core extra)")
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    def config(*extra: str) -> Any:
        composed = _launch_config(*extra)
        OmegaConf.resolve(composed)  # as verl's TaskRunner does before building the trainer
        return composed

    refused = config(*CORRECTION)
    for build in (lambda: trainer_sync.PPOTrainerSync(config=refused),
                  lambda: RayPPOTrainer(refused, None, {}, None)):
        with pytest.raises(UsageError) as error:
            build()
        assert str(error.value) == WEIGHTS
    for extra in (["algorithm.rollout_correction.bypass_mode=True"],
                  ["actor_rollout_ref.rollout.calculate_log_probs=False"],
                  ["algorithm.rollout_correction.rollout_is=null"], [VANILLA]):
        trainer = trainer_sync.PPOTrainerSync(config=config(*CORRECTION, *extra))
        assert trainer.config.algorithm.rollout_correction.rollout_is in ("token", None)


# ---------------------------------------------------------------------------------------------
# vLLM: a temperature it does not sample at


class _ModelLoad(Exception):
    """Raised where the model would load: the start got past the refusals."""


@pytest.mark.parametrize(("backend", "installed", "temperature", "message"), [
    ("auto", True, 2.5, r"^vLLM samples at temperature <= 2, got 2.5: use a lower temperature, or the hf backend$"),
    ("auto", True, 0.005, r"^vLLM samples at temperature >= 0.01 \(it would raise 0.005 to it\)"),
    ("auto", True, 2.0, None), ("auto", True, 0.01, None),
    ("auto", False, 2.5, None),  # auto without vLLM: Hugging Face generate samples at any temperature
    ("hf", True, 2.5, None),
])
def test_ict_train_refuses_a_vllm_temperature_before_the_model_loads(
        backend: str, installed: bool, temperature: float, message: str | None, tmp_path, monkeypatch) -> None:
    """With vLLM rollouts a temperature above 2 (vLLM's traceback) or below 0.01 (vLLM raises
    it without an error) was refused at the first rollout, after the model and the vLLM engine had
    loaded; now before the model loads. Its limits themselves are inclusive."""
    import ict.training.trainer as trainer
    from ict.training.config import TrainConfig

    def model_load(*args: Any) -> None:
        raise _ModelLoad

    monkeypatch.setattr(trainer, "vllm_installed", lambda: installed)
    monkeypatch.setattr(trainer, "_set_up", model_load)
    config = TrainConfig(rollout_backend=backend, temperature=temperature, device="cpu",
                         run_dir=str(tmp_path / "run"))
    if message is None:
        with pytest.raises(_ModelLoad):
            trainer.train(config)
        return
    with pytest.raises(UsageError, match=message) as error:
        trainer.train(config)
    assert "\n" not in str(error.value) and not (tmp_path / "run").exists()


@pytest.mark.parametrize(("temperature", "refused"), [(3.0, True), (0.005, True), (0.0, False), (0.6, False)])
def test_ict_eval_refuses_a_vllm_temperature_before_loading(temperature: float, refused: bool,
                                                            tiny_model_dir, monkeypatch) -> None:
    """``ict eval --backend vllm`` at a temperature vLLM does not sample at was refused at the
    first generation, after the vLLM engine had started; now before the tokenizer loads. At
    temperature 0 the samples are greedy (vLLM's temperature 0), and nothing is refused."""
    import ict.evaluation.generator as generator
    import ict.models.loading as loading
    import ict.models.vllm_backend as vllm_backend
    from ict.evaluation.evaluate import EvalConfig

    started: list[str] = []
    load_tokenizer = loading.load_tokenizer
    monkeypatch.setattr(generator, "vllm_installed", lambda: True)
    monkeypatch.setattr(loading, "load_tokenizer", lambda model: (started.append("tokenizer"), load_tokenizer(model))[1])
    monkeypatch.setattr(vllm_backend, "VLLMBackend", lambda *args, **options: started.append("engine"))
    config = EvalConfig(model=str(tiny_model_dir), backend="vllm", device="cpu", temperature=temperature,
                        max_new_tokens=8)  # within the model's 256 positions
    if not refused:
        assert generator.load_generator(config).name == "vllm" and started == ["tokenizer", "engine"]
        return
    with pytest.raises(UsageError, match=r"^vLLM samples at temperature ") as error:
        generator.load_generator(config)
    assert "\n" not in str(error.value) and started == []


# ---------------------------------------------------------------------------------------------
# TRL: options changed after ICTGRPOConfig's checks


@pytest.mark.parametrize(("change", "message"), [
    ({"stats_tile_size": "big"}, r"^stats_tile_size: tile size must be 'auto' or TOKENSxVOCAB .*got 'big'$"),
    ({"stats_tile_size": "0x10"}, r"^stats_tile_size: "),
    ({"selection_denominator": "Trl"}, r"^selection_denominator must be 'ours' or 'trl', got 'Trl'$"),
    ({"top_entropy_quantile": 0.2}, r"^top_entropy_quantile and token_selector both pick tokens"),
    ({"full_token_warmup_steps": -1}, r"^full_token_warmup_steps must be None or an integer >= 0, got -1$"),
    ({"full_token_warmup_steps": 2.5}, r"^full_token_warmup_steps must be None or an integer >= 0, got 2\.5$"),
])
def test_trl_trainer_refuses_changed_options_before_trl_builds(change: dict[str, Any], message: str,
                                                               tiny_model_dir, tmp_path, monkeypatch) -> None:
    """``ICTGRPOTrainer`` checks the config's refusals again (its fields can change after its
    checks), but did so after TRL's ``GRPOTrainer.__init__`` (which starts a colocated vLLM
    engine), and a changed ``stats_tile_size`` not at all: it failed in the first loss, with a
    message not naming the option; a changed ``full_token_warmup_steps`` was checked after it. Now all are
    refused before TRL's constructor runs; the
    unchanged config builds a trainer."""
    import trl

    built: list[str] = []
    trl_init = trl.GRPOTrainer.__init__
    monkeypatch.setattr(trl.GRPOTrainer, "__init__",
                        lambda self, *args, **kwargs: (built.append("trl"), trl_init(self, *args, **kwargs))[1])

    changed = _trl_config(tmp_path)
    for key, value in change.items():
        setattr(changed, key, value)
    with pytest.raises(ValueError, match=message) as error:
        _trl_trainer(tiny_model_dir, changed)
    assert "\n" not in str(error.value) and built == []
    _trl_trainer(tiny_model_dir, _trl_config(tmp_path))
    assert built == ["trl"]


def _trl_config(tmp_path: Path, **options: Any) -> Any:
    from ict.integrations.trl import ICTGRPOConfig

    return ICTGRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False,
                         per_device_train_batch_size=4, num_generations=4, **options)


def _trl_trainer(model_dir: Path, args: Any) -> Any:
    """An ``ICTGRPOTrainer`` of the tiny model with ``args`` (a constant reward, 4 prompts)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ict.integrations.trl import ICTGRPOTrainer

    return ICTGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir),
                          processing_class=AutoTokenizer.from_pretrained(model_dir),
                          reward_funcs=lambda completions, **kwargs: [0.0] * len(completions), args=args,
                          train_dataset=Dataset.from_dict({"prompt": ["a"] * 4}))


@pytest.mark.parametrize(("selector", "warmup"), [("ict", 10), ("entropy:ratio=0.2", 0)])
def test_trl_trainer_takes_the_methods_warmup_when_it_is_reset_to_none(selector: str, warmup: int,
                                                                       tiny_model_dir, tmp_path) -> None:
    """A ``full_token_warmup_steps`` set to None after the config's checks is the method's
    (the registry: ict's paper warm-up of 10 steps, none for the others), as in the config."""
    config = _trl_config(tmp_path, token_selector=selector, full_token_warmup_steps=3)
    config.full_token_warmup_steps = None
    assert _trl_trainer(tiny_model_dir, config).full_token_warmup_steps == warmup
