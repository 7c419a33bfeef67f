"""Worker for test_accelerate: run under ``accelerate launch`` / torchrun.

Writes ``<out_dir>/rank<N>.json`` with what Accelerate chose and the result of
a gather and a DDP step, which the test compares across ranks.
"""
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from accelerate import Accelerator


def main():
    accelerator = Accelerator()
    rank = accelerator.process_index
    gathered = accelerator.gather(torch.tensor([float(rank + 1)], device=accelerator.device))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optim = accelerator.prepare(model, optim)
    x = torch.full((2, 4), float(rank + 1), device=accelerator.device)
    accelerator.backward(model(x).sum())
    optim.step()
    weight = accelerator.unwrap_model(model).weight.detach().cpu()
    Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps({
        "rank": rank,
        "num_processes": accelerator.num_processes,
        "distributed_type": str(accelerator.distributed_type),
        "backend": accelerator.state.backend,
        "pg_backend": dist.get_backend(),
        "device": str(accelerator.device),
        "gathered": gathered.cpu().tolist(),
        "weight": weight.tolist(),
    }))
    accelerator.end_training()


if __name__ == "__main__":
    main()
