"""One-GPU PyTorch training: a small convolutional front and a two-layer MLP
on random data, the shapes a framework user runs (cuBLAS GEMMs, cuDNN
convolutions, elementwise and reduction kernels, an optimizer step).

    python3 train.py [--steps N] [--batch B] [--graphs]

Prints one RESULT line (the project's test programs' convention) with the
wall time of the training loop and whether the loss went down.
"""
import argparse
import time

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, width=1024):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(8)
        self.fc1 = nn.Linear(16 * 8 * 8, width)
        self.fc2 = nn.Linear(width, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x))
        x = self.pool(x).flatten(1)
        x = torch.relu(self.fc1(x))
        return self.fc2(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--graphs", action="store_true", help="replay the step as a CUDA graph")
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = Net().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(a.batch, 3, 32, 32, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    first = step().item()
    g = None
    if a.graphs:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_loss = step()
    torch.cuda.synchronize()
    t0 = time.time()
    for _ in range(a.steps):
        if g is not None:
            g.replay()
            loss = static_loss
        else:
            loss = step()
    last = loss.item()
    torch.cuda.synchronize()
    dt = time.time() - t0
    ok = int(last < first)
    print(f"RESULT name=torch_train variant={'graphs' if a.graphs else 'eager'} steps={a.steps} "
          f"loop_s={dt:.3f} first_loss={first:.4f} last_loss={last:.4f} ok={ok}", flush=True)


if __name__ == "__main__":
    main()
