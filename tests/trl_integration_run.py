"""Driver for tests/test_integration_trl.py: 2 GRPO steps of a tiny model through
ICTGRPOTrainer (run directly or under ``accelerate launch``); every process dumps each
selection record (gathered tensors, its mask, the LM head weight) to OUT/rank{r}_call{i}.pt and,
for a selector with a KL penalty, each added penalty term (with TRL's and the old log-probs) to
OUT/rank{r}_penalty{i}.pt. Arguments: MODEL_DIR OUT SELECTOR [NUM_ITERATIONS].

SELECTOR may list several runs separated by ';', each optionally ending in '@B' (the
per-device batch, default 4) or '@B@LOSS_TYPE' (default dapo): run i then writes to OUT/i/ (one
process start for all runs). Each process also writes the bytes it received for the selection
(total and by kind) to OUT/rank{r}_bytes.pt and each micro-batch's _compute_loss value to
OUT/rank{r}_loss{i}.pt."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from ict.integrations.trl import ICTGRPOConfig, ICTGRPOTrainer

model_dir, root_dir, selectors = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(";")
num_iterations = int(sys.argv[4]) if len(sys.argv) > 4 else 1
torch.set_num_threads(1)


class DumpingTrainer(ICTGRPOTrainer):
    calls = 0

    def on_selection(self, record):
        head = self.accelerator.unwrap_model(self.model).get_output_embeddings().weight
        own = slice(record["start"], record["start"] + self._loss_inputs["completion_ids"].shape[0])
        dump = {key: value for key, value in record.items() if key != "stats"}
        dump.update(entropy=record["stats"].entropy, log_probs=record["stats"].log_probs,
                    js=dict(record["stats"].js_scores),
                    weight=head.detach().clone(), own=(own.start, own.stop),
                    received=dict(self.ict_received_bytes))
        rank = self.accelerator.process_index
        torch.save(dump, out_dir / f"rank{rank}_call{DumpingTrainer.calls}.pt")
        torch.save({"total": self.ict_gathered_bytes, **self.ict_received_bytes}, out_dir / f"rank{rank}_bytes.pt")
        DumpingTrainer.calls += 1

    def _compute_loss(self, model, inputs):
        loss = super()._compute_loss(model, inputs)
        torch.save(loss.detach().clone(), out_dir / f"rank{self.accelerator.process_index}_loss{DumpingTrainer.calls - 1}.pt")
        return loss

    def kl_penalty_loss(self, log_probs, old_log_probs, inputs):
        term = super().kl_penalty_loss(log_probs, old_log_probs, inputs)
        penalty, weights, mask = self._kl_penalty
        dump = {"term": term.detach().clone(), "log_probs": log_probs.detach().clone(),
                "old_log_probs": old_log_probs.detach().clone(), "old_given": "old_per_token_logps" in inputs,
                "kl_penalty": penalty, "weights": weights, "mask": mask, "advantages": inputs["advantages"],
                "num_items_in_batch": inputs["num_items_in_batch"], "requires_grad": term.requires_grad}
        rank = self.accelerator.process_index
        torch.save(dump, out_dir / f"rank{rank}_penalty{DumpingTrainer.calls - 1}.pt")
        return term


def reward(completions, **kwargs):
    return [float(sum(map(ord, str(completion))) % 7) for completion in completions]


prompts = [[{"role": "user", "content": f"what is {a} + {b} ?"}] for a in range(4) for b in range(4)]
tokenizer = AutoTokenizer.from_pretrained(model_dir)
for index, spec in enumerate(selectors):
    selector, _, rest = spec.partition("@")
    batch, _, loss_type = rest.partition("@")
    out_dir = root_dir / str(index) if len(selectors) > 1 else root_dir
    out_dir.mkdir(exist_ok=True)
    DumpingTrainer.calls = 0
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    args = ICTGRPOConfig(
        output_dir=str(out_dir / "trainer"), token_selector=selector, per_device_train_batch_size=int(batch or 4),
        num_generations=4, max_completion_length=8, max_steps=2, steps_per_generation=1,
        gradient_accumulation_steps=1, learning_rate=1e-3, report_to="none", use_cpu=True,
        logging_steps=1, save_strategy="no", temperature=1.0, seed=0, num_iterations=num_iterations,
        full_token_warmup_steps=0, loss_type=loss_type or "dapo",
    )
    trainer = DumpingTrainer(model=model, processing_class=tokenizer, reward_funcs=reward, args=args,
                             train_dataset=Dataset.from_dict({"prompt": prompts}))
    trainer.train()
    if trainer.accelerator.is_main_process:
        fractions = [entry["ict/selected_fraction"] for entry in trainer.state.log_history
                     if "ict/selected_fraction" in entry]
        torch.save({"fractions": fractions, "log": trainer.state.log_history}, out_dir / "log.pt")
