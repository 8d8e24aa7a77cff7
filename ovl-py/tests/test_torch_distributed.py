"""An ovl op in data-parallel training: two processes on this machine (`torch.distributed`,
gloo backend) train a small model whose normalization is the layer norm of the bundle
`layernorm_grad` under `DistributedDataParallel`; the loss goes down, the parameters stay equal
across the ranks, and they match the same model trained with `torch.nn.functional.layer_norm`
in the same processes."""

import os
import socket

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed: ovl.torch untested")

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

WORLD = 2
STEPS = 12


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Model(torch.nn.Module):
    """Linear, layer norm (ovl's or torch's), tanh, linear: f32[6, 33] -> f32[6, 1]."""

    def __init__(self, norm):
        super().__init__()
        self.inp = torch.nn.Linear(33, 33)
        self.out = torch.nn.Linear(33, 1)
        self.norm = norm

    def forward(self, x):
        return self.out(torch.tanh(self.norm(self.inp(x))))


def train(rank, bundle_path, port, result_dir):
    """One rank: trains the ovl model and the torch model from the same initial parameters on
    this rank's data; saves the losses and final parameters of both."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        import ovl
        import ovl.torch

        torch.set_num_threads(1)
        layernorm = ovl.torch.op(ovl.load(bundle_path))
        results = {}
        for kind, norm in [
            ("ovl", layernorm),
            ("torch", lambda h: torch.nn.functional.layer_norm(h, (33,), eps=1e-5)),
        ]:
            torch.manual_seed(0)  # the same initial parameters on both ranks, for both models
            model = torch.nn.parallel.DistributedDataParallel(Model(norm))
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
            data = torch.Generator().manual_seed(100 + rank)  # each rank its own batches
            target_w = torch.linspace(-1, 1, 33)[:, None]
            losses = []
            for _ in range(STEPS):
                x = torch.randn(6, 33, generator=data)
                y = torch.tanh(x @ target_w)
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
            params = [p.detach().clone() for p in model.module.parameters()]
            results[kind] = {"losses": losses, "params": params}
        torch.save(results, os.path.join(result_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_ddp_two_processes(bundle_dir, tmp_path):
    mp.spawn(
        train,
        args=(str(bundle_dir / "layernorm_grad.json"), free_port(), str(tmp_path)),
        nprocs=WORLD,
        join=True,
    )
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    for r in ranks:
        losses = r["ovl"]["losses"]
        # The loss goes down (each rank's batches differ; compare the first and last thirds).
        assert sum(losses[-4:]) < sum(losses[:4]), losses
        # Same as torch's layer norm, step by step.
        torch.testing.assert_close(
            torch.tensor(losses), torch.tensor(r["torch"]["losses"]), rtol=1e-4, atol=1e-5
        )
    for p0, p1 in zip(ranks[0]["ovl"]["params"], ranks[1]["ovl"]["params"]):
        # DDP averages the gradients: the ranks' parameters stay identical.
        torch.testing.assert_close(p0, p1, rtol=0, atol=0)
    for p, q in zip(ranks[0]["ovl"]["params"], ranks[0]["torch"]["params"]):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)
    # Training moved the parameters.
    torch.manual_seed(0)
    initial = list(Model(None).parameters())
    assert any(not torch.allclose(p, q) for p, q in zip(ranks[0]["ovl"]["params"], initial))
