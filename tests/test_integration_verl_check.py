"""ict's launch check of a verl command line (``python -m ict.integrations.verl_check``, which
``examples/verl/run_gsm8k.sh`` runs before verl's launcher): a bad ICT setting is one line
``ict: ...`` and exit 2, where verl's launcher printed hydra's override banner and a traceback (or
hydra's three-line ``Error in call to target``), exit 1. Through verl's own config (hydra compose
of ``ppo_trainer``) and ``validate_config``; skipped where verl 0.9 is not importable
(tests/verl_helpers.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from verl_helpers import LAUNCH_SCRIPT

from ict.integrations import verl_check

POLICY = "actor_rollout_ref.actor.policy_loss"
NO_OPTION = (f"ict: {POLICY} has no option 'ict_fraction' (ict's options: ict_selector, ict_aggregation, "
             "ict_full_token_warmup_steps, ict_denominator, ict_dual_clip, ict_seed, ict_stats_tile_size; "
             f"add one with a leading '+', e.g. +{POLICY}.ict_selector=ict)")


def script_overrides(method: str = "ict") -> list[str]:
    """The overrides ``examples/verl/run_gsm8k.sh`` hands verl's launcher (its dry run)."""
    environment = {"PATH": os.environ.get("PATH", ""), "METHOD": method, "DRY_RUN": "1", "DATA": "/data"}
    return subprocess.run(["bash", str(LAUNCH_SCRIPT)], env=environment, capture_output=True, text=True,
                          check=True).stdout.splitlines()


@pytest.mark.parametrize(("extra", "line"), [
    ((f"{POLICY}.ict_fraction=2",), NO_OPTION),  # hydra: "Could not override ... not in struct"
    ((f"+{POLICY}.ict_fraction=2",), NO_OPTION),  # hydra: TypeError of the dataclass, in 3 lines
    ((f"+{POLICY}.ict_seed=1.5",), "ict: ict_seed must be an integer, got 1.5"),
    ((f"+{POLICY}.ict_dual_clip=no",), "ict: ict_dual_clip must be true or false, got 'no'"),
    ((f"{POLICY}.ict_seed=3",), f"ict: Could not override '{POLICY}.ict_seed'. To append to your config use "
                                f"+{POLICY}.ict_seed=3"),
    (("actor_rollout_ref.actor.clip_ratio_low=1.5",),
     "ict: loss_mode=ict cannot use the actor's clip_ratio(_low/_high), clip_ratio_c or loss_scale_factor: "
     "need 0 <= clip_low < 1 and clip_high >= 0, got 1.5, 0.28"),
    ((f"{POLICY}.kl_cov_ratio=0.001",),  # read only by verl's own kl_cov loss
     "ict: loss_mode=ict does not read policy_loss.kl_cov_ratio (0.001; verl's own kl_cov loss): set the "
     "selector's option instead, ict_selector='kl_cov:ratio=0.001'"),
    (("actor_rollout_ref.model.use_fused_kernels=true",),
     "ict: loss_mode=ict needs the actor's logits: set actor_rollout_ref.model.use_fused_kernels=False"),
    (("algorithm.rollout_correction.rollout_is=token", "actor_rollout_ref.rollout.calculate_log_probs=True"),
     "ict: loss_mode=ict does not apply rollout importance weights: disable algorithm.rollout_correction"),
])
def test_launch_check_refuses_a_bad_ict_setting_in_one_line(capsys, extra: tuple[str, ...], line: str) -> None:
    assert verl_check.main([*script_overrides(), *extra]) == 2
    assert capsys.readouterr().err == line + "\n"


def test_launch_check_names_an_unknown_selector(capsys) -> None:
    assert verl_check.main([*script_overrides(), f"{POLICY}.ict_selector=foo"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ict: unknown selector 'foo'; registered: all, ") and err.count("\n") == 1


@pytest.mark.parametrize("extra", [(), (f"+{POLICY}.ict_seed=3", f"+{POLICY}.ict_dual_clip=true"),
                                   ("trainer.n_gpus_per_node=3",)])
def test_launch_check_passes_what_ict_takes_and_leaves_verls_own_checks_to_verl(capsys, extra) -> None:
    """The script's own settings pass silently; so does a batch size verl's validate_config
    refuses (512 rows over 3 GPUs: verl's launcher reports that, as for any run)."""
    assert verl_check.main([*script_overrides("random"), *extra]) == 0
    assert capsys.readouterr().err == ""


def _stub_python(tmp_path: Path, check: str) -> Path:
    """A ``python3`` first on PATH that logs its arguments; ict's check runs for real
    (``check="real"``) or exits with status ``check``; verl's launcher is only logged."""
    stub = tmp_path / "python3"
    stub.write_text(f"""#!/usr/bin/env bash
printf '%s\\n' "$*" >> "{tmp_path}/calls"
if [[ "$2" == ict.integrations.verl_check ]]; then
  {f'exec "{sys.executable}" "$@"' if check == "real" else f"exit {check}"}
fi
""")
    stub.chmod(0o755)
    return stub


def _run_script(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    root = str(Path(__file__).resolve().parents[1])
    environment = {"PATH": f"{tmp_path}:{os.environ.get('PATH', '')}", "METHOD": "ict", "DATA": "/data",
                   "HOME": str(tmp_path), "PYTHONPATH": root}
    return subprocess.run(["bash", str(LAUNCH_SCRIPT), *extra], env=environment, capture_output=True, text=True)


def test_launch_script_runs_the_check_before_verl(tmp_path: Path) -> None:
    """run_gsm8k.sh runs ict's check on its own and the user's overrides, then verl's launcher
    with the same ones; a refusal (exit 2) stops it before verl."""
    _stub_python(tmp_path, "0")
    assert _run_script(tmp_path, "trainer.total_epochs=1").returncode == 0
    check, launch = (tmp_path / "calls").read_text().splitlines()
    arguments = " ".join([*script_overrides(), "trainer.total_epochs=1"])
    assert check == f"-m ict.integrations.verl_check {arguments}"
    assert launch == f"-m verl.trainer.main_ppo {arguments}"
    (tmp_path / "calls").unlink()
    _stub_python(tmp_path, "2")
    assert _run_script(tmp_path).returncode == 2
    assert (tmp_path / "calls").read_text().splitlines() == [f"-m ict.integrations.verl_check {' '.join(script_overrides())}"]


def test_launch_script_refuses_a_bad_ict_option_in_one_line(tmp_path: Path) -> None:
    """The whole path: the script, the real check in a fresh interpreter; verl never starts."""
    _stub_python(tmp_path, "real")
    run = _run_script(tmp_path, f"+{POLICY}.ict_seed=1.5")
    assert run.returncode == 2 and run.stderr == "ict: ict_seed must be an integer, got 1.5\n", run.stderr
    assert len((tmp_path / "calls").read_text().splitlines()) == 1  # the check only


@pytest.mark.parametrize(("method", "extra", "code", "err"), [
    ("ict", (f"+{POLICY}.ict_seed=1.5",), 2, "ict: ict_seed must be an integer, got 1.5\n"),
    ("random", (), 0, ""),
])
def test_launch_check_in_a_fresh_interpreter_prints_its_line_only(method, extra, code, err) -> None:
    """``python -m ict.integrations.verl_check`` as the script runs it: nothing on stderr but the
    refusal, where verl's accelerator probe logged two WARNING lines ("No supported accelerator
    detected ... Falling back to 'nvidia'") on a machine without a GPU."""
    root = str(Path(__file__).resolve().parents[1])
    environment = {**os.environ, "PYTHONPATH": root}
    run = subprocess.run([sys.executable, "-m", "ict.integrations.verl_check", *script_overrides(method), *extra],
                         env=environment, capture_output=True, text=True)
    assert (run.returncode, run.stderr, run.stdout) == (code, err, "")
