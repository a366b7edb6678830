"""Driver for tests/test_integration_trl_trainer.py (under ``accelerate launch`` with 2 processes): one
group of G = 4 tool-use completions spread over the processes, 2 rows each, scored with ICT's
default reference through ``ICTGRPOTrainer._compute_loss``. Rank 0 holds row 0 (cut at
max_completion_length = 7 right after a 2-token tool result: no EOS) and row 1 (EOS at 4); rank 1
holds rows 2 and 3 (EOS at 6 and 2) in a batch one column narrower. Each process dumps its
record (its rows' scores, hidden states, ids, masks) and the LM head weight to OUT/rank{r}.pt.
Arguments: MODEL_DIR OUT."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from ict.integrations.trl import ICTGRPOConfig, ICTGRPOTrainer

model_dir, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
torch.set_num_threads(1)
torch.manual_seed(0)
args = ICTGRPOConfig(output_dir=str(out_dir / "trainer"), token_selector="ict:ratio=0.5", full_token_warmup_steps=0,
                     per_device_train_batch_size=2, num_generations=4, max_completion_length=7, report_to="none",
                     use_cpu=True, bf16=False, temperature=1.0)
trainer = ICTGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir),
                         processing_class=AutoTokenizer.from_pretrained(model_dir),
                         reward_funcs=lambda completions, **kwargs: [0.0] * len(completions), args=args,
                         train_dataset=Dataset.from_dict({"prompt": ["a"] * 4}))
trainer.model.train()
trainer.current_gradient_accumulation_steps = 1
eos, pad = trainer.eos_token_ids[0], trainer._tokenizer.pad_token_id
vocab = trainer.model.config.vocab_size
generator = torch.Generator().manual_seed(1)  # the same draws on both processes: the whole group
lengths = torch.tensor([7, 4, 6, 2])
completion_mask = (torch.arange(7)[None, :] < lengths[:, None]).long()
ids = torch.where(completion_mask.bool(), torch.randint(3, vocab, (4, 7), generator=generator), pad)
ids[torch.arange(1, 4), lengths[1:] - 1] = eos
tool_mask = torch.ones_like(completion_mask)
tool_mask[0, 5:] = 0
prompt_ids = torch.randint(3, vocab, (4, 3), generator=generator)
rank = trainer.accelerator.process_index
own, width = (slice(0, 2), 7) if rank == 0 else (slice(2, 4), 6)
mask = completion_mask * tool_mask
inputs = {"prompt_ids": prompt_ids[own], "prompt_mask": torch.ones(2, 3, dtype=torch.long),
          "completion_ids": ids[own, :width], "completion_mask": completion_mask[own, :width],
          "tool_mask": tool_mask[own, :width], "advantages": torch.tensor([1.0, -0.5, 0.25, -2.0])[own],
          "num_items_in_batch": mask.sum(), "ict_group_ids": torch.zeros(2, dtype=torch.long)}
records = []
trainer.on_selection = records.append
trainer._compute_loss(trainer.model, inputs)
record = records[-1]
torch.save({"js": record["stats"].js_scores["group_mean_absorbing"], "hidden": record["hidden"],
            "received": dict(trainer.ict_received_bytes), "ids": ids, "mask": mask.bool(), "own": (own.start, own.stop),
            "weight": trainer.model.get_output_embeddings().weight.detach().clone()}, out_dir / f"rank{rank}.pt")
