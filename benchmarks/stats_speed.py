"""Time of the token statistics per JS reference, against the same statistics without a JS score,
and (``--baseline DIR``) against another checkout of ict, side by side.

No-grad statistics of a batch shaped like the CPU comparison's (64 completions x 32 positions,
V = 49,152 and d = 576 as in SmolLM2-135M), from the logits (`token_statistics`) and from the
hidden states (`token_statistics_from_hidden`, the TRL integration's path). Cases run
interleaved round by round; printed: the median seconds per case and its ratio to the case
without a JS score (the cost of the score on top of log-probs, entropy and Renyi-2)::

    PYTHONPATH=$PWD python benchmarks/stats_speed.py --rounds 5 --threads 1

With ``--baseline DIR`` (e.g. ``git worktree add /tmp/parent HEAD~1``) each round runs one
process on this checkout and one on ``DIR``, in alternating order, each timing every case once
after a warm-up with only the API both have; printed: both medians and their ratio::

    PYTHONPATH=$PWD python benchmarks/stats_speed.py --baseline /tmp/parent --rounds 5 --threads 2

``--step`` times a training step's part instead, from the hidden states with gradients: GRPO
(log-probs, backward of ``sum(log_probs * advantage)``) and ICT (plus ICT's default reference,
the registry's selection at ratio 0.1 and ICT's loss), ``benchmarks/head_step.py``'s steps, as
``benchmarks/ict_cost.py`` (a) times them;
e.g. at (a)'s CPU shape against another checkout::

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
STEP_CASES = [("hidden, forward + backward", name) for name in ("grpo", "ict")]  # --step


def cases_of(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The cases timed: :data:`STEP_CASES` with ``--step``, else :data:`CASES`; the first is the
    one the others are compared with."""
    return STEP_CASES if args.step else CASES


def time_cases(args: argparse.Namespace, rounds: int) -> dict[str, list[float]]:
    """Seconds of every case, ``rounds`` interleaved rounds after one warm-up of each."""
    import head_step  # beside this file; it imports the ict on sys.path (a child's checkout)
    import torch

    from ict.core.stats import token_statistics, token_statistics_from_hidden

    torch.set_num_threads(args.threads)
    batch = head_step.head_batch(args.rows, args.length, args.width, args.vocab)
    hidden, weight, tokens, mask = batch.hidden.detach(), batch.weight.detach(), batch.token_ids, batch.response_mask
    logits = None if args.step else hidden @ weight.T  # the no-grad cases' logits ([R, T, V]; --step has none)

    def run(path: str, name: str) -> None:
        if args.step:  # GRPO's or ICT's part of a step, forward + backward
            head_step.ours(batch, name).backward()
            batch.clear_grads()
            return
        references = REFERENCES[name]
        with torch.no_grad():
            if path == "logits":
                token_statistics(logits, tokens, mask, 1.0, references, group_ids=batch.group_ids)
            else:
                token_statistics_from_hidden(hidden, weight, tokens, mask, 1.0, references, group_ids=batch.group_ids)

    times: dict[str, list[float]] = {f"{path} {name}": [] for path, name in cases_of(args)}
    for path, name in cases_of(args):
        run(path, name)  # warm-up
    for _ in range(rounds):
        for path, name in cases_of(args):
            start = time.perf_counter()
            run(path, name)
            times[f"{path} {name}"].append(time.perf_counter() - start)
    return times


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
                        "the hidden states (selection and loss included) instead of the no-grad statistics")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)  # the checkout a child imports
    args = parser.parse_args()
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
        times = time_cases(args, args.rounds)
        print(f"{shape}\n\n| path | {column} | seconds | ratio to {first} |\n|---|---|---|---|")
        for path, name in cases:
            median, base = statistics.median(times[f"{path} {name}"]), statistics.median(times[f"{path} {first}"])
            print(f"| {path} | {name} | {median:.3f} | {median / base:.2f} |")
        return
    trees = {"this checkout": str(ROOT), "baseline": str(Path(args.baseline).resolve())}
    times = {tree: {f"{path} {name}": [] for path, name in cases} for tree in trees}
    options = [f"--{key}={getattr(args, key)}" for key in ("rows", "length", "vocab", "width", "threads")]
    options += ["--step"] if args.step else []
    for round_index in range(args.rounds):
        for tree in (list(trees) if round_index % 2 == 0 else list(trees)[::-1]):
            result = subprocess.run([sys.executable, __file__, "--child", trees[tree], *options],
                                    capture_output=True, text=True, cwd=trees[tree])
            if result.returncode:
                sys.exit(f"{tree} failed:\n{result.stderr[-3000:]}")
            for case, values in json.loads(result.stdout.strip().splitlines()[-1]).items():
                times[tree][case].extend(values)
    print(f"{shape}; one process per checkout and round, alternating; baseline: {args.baseline}\n\n"
          f"| path | {column} | this checkout (s) | baseline (s) | this / baseline |\n|---|---|---|---|---|")
    for path, name in cases:
        ours, theirs = (statistics.median(times[tree][f"{path} {name}"]) for tree in trees)
        print(f"| {path} | {name} | {ours:.3f} | {theirs:.3f} | {ours / theirs:.2f} |")


if __name__ == "__main__":
    main()
