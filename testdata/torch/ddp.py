"""DDP training over NCCL, one process per GPU, launched by torchrun:

    torchrun --standalone --nproc_per_node 2 ddp.py [--steps N]

The model and data are train.py's; each rank prints a RESULT line.
"""
import argparse
import faulthandler
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from train import Net


def main():
    # SIGUSR1 prints every thread's Python stack to stderr: what a hung
    # rank waits for (gpu-check's ddp phase sends it before its timeout).
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256)
    a = ap.parse_args()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    dev = torch.device("cuda", local)
    model = DDP(Net().to(dev), device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(a.batch, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    first = None
    torch.cuda.synchronize()
    t0 = time.time()
    for _ in range(a.steps):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        if first is None:
            first = loss.item()
    last = loss.item()
    torch.cuda.synchronize()
    dt = time.time() - t0
    dist.barrier()
    print(f"RESULT name=torch_ddp rank={rank} world={dist.get_world_size()} gpu={local} steps={a.steps} "
          f"loop_s={dt:.3f} first_loss={first:.4f} last_loss={last:.4f} ok={int(last < first)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
