"""The Triton kernels' machine code for an H100 (sm_90), compiled here without a GPU: instructions
an element in each kernel's main loop, against TRL 1.16's fused-head kernels and (``--baseline
DIR``) another checkout of ict, side by side.

A static proxy for a session without a GPU, not a timing: the group kernel (ICT's score pass) is
bound by its instructions (~1e8 elements a 4,096 x 32,768 tile, each with an exponential, two
logarithms and their sums), so fewer instructions an element is less time there, while the
statistics and gradient kernels sit near the memory bound. Each kernel is compiled as it is
launched at ``ict_cost.py`` (a)'s shape: a bf16 tile, 16-byte aligned pointers and strides, ICT's
default reference (``group_mean_absorbing``) in groups of 8 (and the leave-one-out variant). Its
SASS comes from Triton's own ``nvdisasm``; the main loop is the longest backward branch, without
the loops nested in it (the group kernel's loop over absorbed point masses, counted apart, per
point mass). Registers and spilled bytes from Triton's ``ptxas -v``::

    PYTHONPATH=$PWD python benchmarks/kernel_sass.py
    PYTHONPATH=$PWD python benchmarks/kernel_sass.py --baseline /tmp/parent   # git worktree add /tmp/parent HEAD~1
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # compile for the GPU (ict's kernels read it at import)

POINTER = "*fp32"
TYPES = {  # every kernel argument that is no constexpr, by name (ours and TRL's)
    "tile_ptr": "*bf16", "mm_ptr": "*bf16", "out_ptr": "*bf16", "stride": "i64", "mm_stride": "i64",
    "out_stride": "i64", "rows_ptr": "*i64", "targets_ptr": "*i64", "start_ptr": "*i64", "size_ptr": "*i64",
    "absorbed_token_ptr": "*i64", "absorbed_width": "i32", "num_rows": "i32", "vocab_start": "i32",
    "n_cols": "i32", "span": "i32", "inv_t": "fp32", "tiny": "fp32", "logit_scale": "fp32", "softcap": "fp32",
}
ALIGNED_INTEGERS = {"stride", "mm_stride", "out_stride", "span", "n_cols", "num_rows", "vocab_start"}
GROUP_SIZE = 8  # ICT's groups of 8 completions


def kernel_cases() -> list[tuple[str, object, dict, int]]:
    """``(label, kernel, constexprs, elements a program folds a loop step)`` as (a) launches them."""
    from ict.core.stats import triton_tiles as ours

    statistics_block = getattr(ours, "_STATISTICS_BLOCK", 1024)
    grad_block = getattr(ours, "_GRAD_BLOCK", 1024)
    group_elements = getattr(ours, "_GROUP_ELEMENTS", 4096)  # BLOCK_G x BLOCK_V, as group_partials launches it
    block_v = max(16, group_elements // GROUP_SIZE)
    group = {"INDEXED": False, "WANT_JS": True, "WANT_KL": False, "WANT_TV": False, "WANT_MASS": False,
             "BLOCK_G": GROUP_SIZE, "BLOCK_V": block_v}
    cases = [
        ("ours: statistics pass", ours._statistics_kernel, {"INDEXED": False, "BLOCK_V": statistics_block},
         statistics_block),
        ("ours: group kernel, group_mean_absorbing", ours._group_kernel, {**group, "LEAVE_ONE_OUT": False},
         group_elements),
        ("ours: group kernel, leave-one-out", ours._group_kernel, {**group, "LEAVE_ONE_OUT": True}, group_elements),
        # JS and KL together (js and kl scores of group_mean_absorbing): the KL's cross term and the
        # row's mass (the leave-one-out KL is folded in torch: supports_group)
        ("ours: group kernel, group_mean_absorbing, JS + KL", ours._group_kernel,
         {**group, "LEAVE_ONE_OUT": False, "WANT_KL": True, "WANT_MASS": True}, group_elements),
        ("ours: logit gradient (log-probs)", ours._logit_grad_kernel,
         {"INDEXED": False, "HAS_LOG_PROB_GRAD": True, "HAS_ENTROPY_GRAD": False, "BLOCK_V": grad_block}, grad_block),
    ]
    try:
        from trl.kernels import chunked_logprob as trl_kernels
    except ImportError:
        return cases
    block = trl_kernels._BLOCK_SIZE
    cases += [
        ("TRL: forward (log-probs + entropy)", trl_kernels._forward_kernel,
         {"HAS_SOFTCAP": False, "HAS_ENTROPY": True, "HAS_LOG_SUM_SQ_PROBS": False, "HAS_MEAN_LOGITS": False,
          "HAS_IS_TOP1": False, "BLOCK_SIZE": block}, block),
        ("TRL: backward (log-probs)", trl_kernels._backward_kernel,
         {"HAS_SOFTCAP": False, "HAS_LOGPROB_GRAD": True, "HAS_ENTROPY_GRAD": False, "BLOCK_SIZE": block}, block),
    ]
    return cases


INSTRUCTION = re.compile(r"\s*/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)")


def loops(sass: list[str]) -> list[tuple[int, int]]:
    """``(first, last)`` line of each backward branch's region (a loop)."""
    labels, found = {}, []
    for index, line in enumerate(sass):
        label = re.match(r"\.(L_x_\d+):", line.strip())
        if label:
            labels[label.group(1)] = index
        branch = re.search(r"BRA `\(\.(L_x_\d+)\)", line)
        if branch and branch.group(1) in labels and index - labels[branch.group(1)] > 2:  # not the end's BRA to itself
            found.append((labels[branch.group(1)], index))
    return found


def count(sass: list[str], first: int, last: int, skip: list[tuple[int, int]] = ()) -> Counter:
    ops: Counter = Counter()
    for index in range(first, last + 1):
        if any(a <= index <= b for a, b in skip):
            continue
        match = INSTRUCTION.match(sass[index])
        if match:
            ops[match.group(1)] += 1
    return ops


def compile_case(kernel, constexprs: dict, elements: int, num_warps: int = 4) -> dict:
    """Compile one kernel for sm_90 and measure its main loop."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(kernel.arg_names)
    signature = {name: "constexpr" if name in constexprs else TYPES.get(name, POINTER) for name in names}
    aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(names)
               if signature[name].startswith("*") or name in ALIGNED_INTEGERS}
    source = ASTSource(kernel, signature=signature, constexprs={k: v for k, v in constexprs.items() if k in names},
                       attrs=aligned)
    compiled = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps})
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    with tempfile.TemporaryDirectory() as scratch:
        cubin, ptx = Path(scratch) / "kernel.cubin", Path(scratch) / "kernel.ptx"
        cubin.write_bytes(compiled.asm["cubin"])
        ptx.write_text(compiled.asm["ptx"])
        sass = subprocess.run([str(tools / "nvdisasm"), "-c", str(cubin)], capture_output=True, text=True,
                              check=True).stdout.splitlines()
        ptxas = next(path for path in (tools / "ptxas-blackwell", tools / "ptxas") if path.exists())
        verbose = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", str(ptx), "-o", os.devnull],
                                 capture_output=True, text=True).stderr
    registers = re.search(r"Used (\d+) registers", verbose)
    spills = re.search(r"(\d+) bytes spill stores", verbose)
    per_thread = elements / (32 * num_warps)
    regions = loops(sass)
    if regions:
        outer = max(regions, key=lambda region: region[1] - region[0])
        nested = [region for region in regions if region != outer and outer[0] <= region[0] <= outer[1]]
        body = count(sass, *outer, skip=nested)
        inner = min((sum(count(sass, *region).values()) for region in nested), default=0)
    else:  # one block a program: the whole kernel
        body, inner = count(sass, 0, len(sass) - 1), 0
    return {"per_element": sum(body.values()) / per_thread, "special_per_element": body["MUFU"] / per_thread,
            "nested_per_element": inner / per_thread, "registers": int(registers.group(1)) if registers else None,
            "spill_bytes": int(spills.group(1)) if spills else None,
            "loop_instructions": sum(body.values())}


def measure() -> dict[str, dict]:
    return {label: compile_case(kernel, constexprs, elements) for label, kernel, constexprs, elements in kernel_cases()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, help="another ict checkout, compiled side by side")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--emit-json", action="store_true", help=argparse.SUPPRESS)  # the baseline's process
    args = parser.parse_args()
    if args.baseline is not None and not (args.baseline / "ict" / "core" / "stats" / "triton_tiles.py").exists():
        parser.exit(2, f"kernel_sass.py: error: --baseline {args.baseline} holds no ict/core/stats/triton_tiles.py\n")
    here = measure()
    if args.emit_json:
        print(json.dumps(here))
        return
    base = {}
    if args.baseline is not None:
        env = {**os.environ, "PYTHONPATH": str(args.baseline.resolve())}
        done = subprocess.run([sys.executable, __file__, "--emit-json"], capture_output=True, text=True, env=env,
                              cwd=args.baseline)
        if done.returncode:
            parser.exit(1, f"kernel_sass.py: the baseline did not compile: {done.stderr.strip()[-500:]}\n")
        base = json.loads(done.stdout.strip().splitlines()[-1])
    print("SASS for sm_90 (H100), compiled here; instructions an element in each kernel's main loop"
          " (4 warps a program)\n")
    header = ("| kernel | instructions / element | special-function / element | per point mass | registers |"
              " spilled bytes |")
    if base:
        header += " baseline instructions / element | x baseline |"
    print(header)
    print("|" + "---|" * header.count(" |"))
    for label, figures in here.items():
        line = (f"| {label} | {figures['per_element']:.1f} | {figures['special_per_element']:.2f} | "
                f"{figures['nested_per_element']:.1f} | {figures['registers']} | {figures['spill_bytes']} |")
        if base:
            old = base.get(label)
            line += (f" {old['per_element']:.1f} | {figures['per_element'] / old['per_element']:.2f} |" if old
                     else " - | - |")
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"ours": here, "baseline": base}, indent=1))


if __name__ == "__main__":
    main()
