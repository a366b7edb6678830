"""``python -m ict.integrations.verl_check [hydra overrides]``: ict's launch check of a verl
command line, one line ``ict: <refusal>`` on stderr and exit 2 for an ICT setting verl would
refuse only inside hydra (``examples/verl/run_gsm8k.sh`` runs it before
``python -m verl.trainer.main_ppo`` with the same overrides; exit 0 and no output otherwise).

verl's launcher refuses the same settings, but prints hydra's ``Error executing job with
overrides: [...]`` banner (every override on one line) and then our refusal inside hydra's
``InstantiationException``, or a traceback for a refusal of :func:`ict.integrations.verl.actor_refusal`
(exit 1). This check composes verl's own ``ppo_trainer`` config with the overrides and runs
verl's own ``validate_config`` (which builds the actor config, :class:`ICTPolicyLossConfig`
included), as ``main_ppo`` does before Ray starts, and reports:

- an ``actor_rollout_ref.actor.policy_loss.<name>`` override that names no field of
  :class:`ICTPolicyLossConfig` (``ict_fraction=2``: hydra's "not in struct", or with ``+`` a
  ``TypeError`` of the dataclass);
- a hydra composition error of a ``policy_loss`` override (e.g. an ``ict_*`` field without
  the ``+`` that adds it);
- a bad ``ICTPolicyLossConfig`` field (:class:`UsageError` or the selector parser's ValueError
  inside hydra's ``InstantiationException``), an actor setting ict's loss cannot take
  (:func:`ict.integrations.verl.actor_refusal`), rollout importance weights
  (:func:`ict.integrations.verl.rollout_weights_refusal`).

Anything else (verl's own checks: batch sizes, micro-batch settings) is left to verl's launcher,
which reports it as it does for any run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

from ict.core.errors import UsageError, one_line

POLICY_LOSS = "actor_rollout_ref.actor.policy_loss"
# verl's accelerator probe, which on a machine without a GPU logs two WARNING lines ("No supported
# accelerator detected ... Falling back to 'nvidia'") when the check first imports verl's workers
PLATFORM_LOGGER = "verl.plugin.platform.platform_manager"


def _override_key(override: str) -> str:
    """The key of hydra override ``override`` (``+a.b=1``, ``++a.b=1``, ``~a.b`` -> ``a.b``)."""
    return override.split("=", 1)[0].lstrip("+~")


def unknown_policy_loss_option(overrides: list[str], fields: list[str]) -> str | None:
    """The refusal of the first ``policy_loss.<name>`` override whose ``<name>`` is none of
    ``fields`` (the policy-loss config's), or None."""
    ict_fields = [name for name in fields if name.startswith("ict_")]
    for override in overrides:
        key = _override_key(override)
        name = key[len(POLICY_LOSS) + 1:] if key.startswith(f"{POLICY_LOSS}.") else None
        if name is not None and name.split(".", 1)[0] not in (*fields, "_target_"):
            return (f"{POLICY_LOSS} has no option {name!r} (ict's options: {', '.join(ict_fields)}; "
                    f"add one with a leading '+', e.g. +{POLICY_LOSS}.ict_selector=ict)")
    return None


def _hydra_refusal(error: Exception) -> str | None:
    """Our one-line refusal inside hydra's ``InstantiationException`` of the policy-loss config,
    or None when the error is not about it."""
    cause = error.__cause__
    if f"full_key: {POLICY_LOSS}" not in str(error) or cause is None:
        return None
    if isinstance(cause, (UsageError, ValueError)):
        return str(cause)
    if isinstance(cause, TypeError):  # an option the dataclass has no field for
        return f"{POLICY_LOSS}: {cause}"
    return None


@contextlib.contextmanager
def _quiet_platform_probe() -> Iterator[None]:
    """Drop the records below ERROR of verl's accelerator probe (:data:`PLATFORM_LOGGER`) while
    inside: the check's output is its one line. A logger filter, as verl's module sets the
    logger's level when imported."""
    platform_logger = logging.getLogger(PLATFORM_LOGGER)
    platform_logger.addFilter(_errors_only)
    try:
        yield
    finally:
        platform_logger.removeFilter(_errors_only)


def _errors_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


def launch_refusal(overrides: list[str]) -> str | None:
    """The one-line refusal of verl launch overrides ``overrides`` for ``loss_mode=ict`` (see the
    module docstring), or None."""
    with _quiet_platform_probe():
        return _launch_refusal(overrides)


def _launch_refusal(overrides: list[str]) -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import verl
        from hydra import compose, initialize_config_dir
        from hydra.errors import HydraException, InstantiationException
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config

        from ict.integrations.verl import ICTPolicyLossConfig, rollout_weights_refusal

    refusal = unknown_policy_loss_option(overrides, [field.name for field in dataclasses.fields(ICTPolicyLossConfig)])
    if refusal:
        return refusal
    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    try:
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            config = compose("ppo_trainer", overrides=list(overrides))
    except HydraException as error:
        message = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
        return message if POLICY_LOSS in message else None
    except Exception:  # noqa: BLE001 (no ICT setting: verl's launcher reports it)
        return None
    try:  # verl's own launch check, as main_ppo runs it (its success line goes to stdout)
        refusal = rollout_weights_refusal(config)
        if refusal:
            return refusal
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            validate_config(config, use_reference_policy=need_reference_policy(config),
                            use_critic=need_critic(config))
    except UsageError as error:
        return str(error)
    except InstantiationException as error:
        return _hydra_refusal(error)
    except Exception:  # noqa: BLE001 (verl's own checks: left to verl's launcher)
        return None
    return None


def main(argv: list[str] | None = None) -> int:
    """Print ``ict: <refusal>`` on stderr and return 2, or return 0."""
    refusal = launch_refusal(sys.argv[1:] if argv is None else argv)
    if refusal is None:
        return 0
    print(f"ict: {one_line(refusal)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

