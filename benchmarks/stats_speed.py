r"""Time of the token statistics per JS reference, against the same statistics without a JS score,
and (``--baseline DIR``) against another checkout of ict, side by side.

No-grad statistics of a batch shaped like the CPU comparison's (64 completions x 32 positions,
V = 49,152 and d = 576 as in SmolLM2-135M), from the logits (`token_statistics`) and from the
hidden states (`token_statistics_from_hidden`, the TRL integration's path). Cases run
interleaved round by round; printed: the median seconds per case, its ratio to the case
without a JS score (the cost of the score on top of log-probs, entropy and Renyi-2) and its median
minor page faults (fresh memory mapped in: a CPU's cost of tiles allocated anew)::

    PYTHONPATH=$PWD python benchmarks/stats_speed.py --rounds 5 --threads 1

With ``--baseline DIR`` (e.g. ``git worktree add /tmp/parent HEAD~1``) each round runs one
process on this checkout and one on ``DIR``, in alternating order, each timing every case once
after a warm-up with only the API both have; printed: both medians, their ratio and both median
page faults::

    PYTHONPATH=$PWD python benchmarks/stats_speed.py --baseline /tmp/parent --rounds 5 --threads 2

``--step`` times a training step's part instead, with gradients: GRPO (log-probs, backward of
``sum(log_probs * advantage)``) and ICT (plus ICT's default reference, the registry's selection at
ratio 0.1 and ICT's loss), ``benchmarks/head_step.py``'s steps, as ``benchmarks/ict_cost.py`` (a)
times them; from the hidden states (``--source hidden``, TRL's path and a GPU's default) or from
the logits (``--source logits``: ``token_statistics`` on given logits ``[R, T, V]``, a leaf that the
backward stops at, so the head's product is left out; ``ict train``'s default on a CPU, so the
offline default's). E.g. at (a)'s CPU shape against another checkout::

    PYTHONPATH=$PWD python benchmarks/stats_speed.py --step --rows 16 --length 64 --vocab 151936 \
        --width 896 --threads 2 --rounds 6 --baseline /tmp/parent
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = {"none": (), "group_mean": ("group_mean",), "seq_mean": ("seq_mean",), "prev": ("prev",)}
CASES = [(path, name) for path in ("logits", "hidden") for name in REFERENCES]
STEP_METHODS = ("grpo", "ict")  # --step


def cases_of(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The cases timed: GRPO's and ICT's step from ``--source`` with ``--step``, else :data:`CASES`;
    the first is the one the others are compared with."""
    return [(f"{args.source}, forward + backward", name) for name in STEP_METHODS] if args.step else CASES


def minor_page_faults() -> int:
    """This process's minor page faults so far (``getrusage``; 0 where there is no ``resource``)."""
    try:
        import resource
    except ImportError:  # not a Unix
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def time_cases(args: argparse.Namespace, rounds: int) -> dict[str, dict[str, list[float]]]:
    """``{"seconds": ..., "faults": ...}``: the seconds and minor page faults (pages of fresh
    memory the kernel mapped in, each a trap) of every case by name, ``rounds`` interleaved rounds
    after one warm-up of each."""
    import head_step  # beside this file; it imports the ict on sys.path (a child's checkout)
    import torch

    from ict.core.stats import token_statistics, token_statistics_from_hidden

    torch.set_num_threads(args.threads)
    batch = head_step.head_batch(args.rows, args.length, args.width, args.vocab)
    hidden, weight, tokens, mask = batch.hidden.detach(), batch.weight.detach(), batch.token_ids, batch.response_mask
    logits = None  # [R, T, V]: the no-grad cases' logits, or --step --source logits's leaf
    if not args.step or args.source == "logits":
        logits = (hidden @ weight.T).requires_grad_(args.step)

    def run(path: str, name: str) -> None:
        if args.step:  # GRPO's or ICT's part of a step, forward + backward
            head_step.ours(batch, name, source=args.source, logits=logits).backward()
            batch.clear_grads()
            if logits is not None:
                logits.grad = None
            return
        references = REFERENCES[name]
        with torch.no_grad():
            if path == "logits":
                token_statistics(logits, tokens, mask, 1.0, references, group_ids=batch.group_ids)
            else:
                token_statistics_from_hidden(hidden, weight, tokens, mask, 1.0, references, group_ids=batch.group_ids)

    measured: dict[str, dict[str, list[float]]] = {
        kind: {f"{path} {name}": [] for path, name in cases_of(args)} for kind in ("seconds", "faults")}
    for path, name in cases_of(args):
        run(path, name)  # warm-up
    for _ in range(rounds):
        for path, name in cases_of(args):
            faults, start = minor_page_faults(), time.perf_counter()
            run(path, name)
            measured["seconds"][f"{path} {name}"].append(time.perf_counter() - start)
            measured["faults"][f"{path} {name}"].append(minor_page_faults() - faults)
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=64, help="completions (groups of 8)")
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--width", type=int, default=576)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--baseline", default=None, help="another checkout of ict, timed side by side")
    parser.add_argument("--step", action="store_true", help="time GRPO's and ICT's forward + backward from "
                        "--source (selection and loss included) instead of the no-grad statistics")
    parser.add_argument("--source", choices=("hidden", "logits"), default="hidden",
                        help="with --step: statistics from the hidden states or from the logits")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # the checkout a child imports
    args = parser.parse_args()
    for name in ("rows", "length", "vocab", "width", "rounds", "threads"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: at least 1, not {getattr(args, name)}")
    if args.baseline is not None and not (Path(args.baseline) / "ict").is_dir():
        parser.error(f"--baseline: {args.baseline} is no checkout of ict (no ict/ folder in it)")
    cases = cases_of(args)
    first, column = cases[0][1], "method" if args.step else "JS reference"
    shape = (f"{args.rows} x {args.length} positions, V = {args.vocab}, d = {args.width}, "
             f"{args.threads} thread(s), median of {args.rounds} rounds")
    if args.child is not None:
        sys.path.insert(0, args.child)
        print(json.dumps(time_cases(args, 1)))
        return
    if args.baseline is None:
        sys.path.insert(0, str(ROOT))
        measured = time_cases(args, args.rounds)
        times, faults = measured["seconds"], measured["faults"]
        print(f"{shape}\n\n| path | {column} | seconds | ratio to {first} | page faults |\n|---|---|---|---|---|")
        for path, name in cases:
            median, base = statistics.median(times[f"{path} {name}"]), statistics.median(times[f"{path} {first}"])
            print(f"| {path} | {name} | {median:.3f} | {median / base:.2f} | "
                  f"{statistics.median(faults[f'{path} {name}']):.0f} |")
        return
    trees = {"this checkout": str(ROOT), "baseline": str(Path(args.baseline).resolve())}
    times = {tree: {f"{path} {name}": [] for path, name in cases} for tree in trees}
    faults = {tree: {f"{path} {name}": [] for path, name in cases} for tree in trees}
    options = [f"--{key}={getattr(args, key)}" for key in ("rows", "length", "vocab", "width", "threads")]
    options += ["--step", f"--source={args.source}"] if args.step else []
    for round_index in range(args.rounds):
        for tree in (list(trees) if round_index % 2 == 0 else list(trees)[::-1]):
            result = subprocess.run([sys.executable, __file__, "--child", trees[tree], *options],
                                    capture_output=True, text=True, cwd=trees[tree])
            if result.returncode:
                sys.exit(f"{tree} failed:\n{result.stderr[-3000:]}")
            measured = json.loads(result.stdout.strip().splitlines()[-1])
            for case in times[tree]:
                times[tree][case].extend(measured["seconds"][case])
                faults[tree][case].extend(measured["faults"][case])
    print(f"{shape}; one process per checkout and round, alternating; baseline: {args.baseline}\n\n"
          f"| path | {column} | this checkout (s) | baseline (s) | this / baseline | page faults: this checkout "
          f"| page faults: baseline |\n|---|---|---|---|---|---|---|")
    for path, name in cases:
        ours, theirs = (statistics.median(times[tree][f"{path} {name}"]) for tree in trees)
        our_faults, their_faults = (statistics.median(faults[tree][f"{path} {name}"]) for tree in trees)
        print(f"| {path} | {name} | {ours:.3f} | {theirs:.3f} | {ours / theirs:.2f} | {our_faults:.0f} "
              f"| {their_faults:.0f} |")


if __name__ == "__main__":
    main()
