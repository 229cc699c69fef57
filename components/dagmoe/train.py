"""Stage train: one language model per (variant, seed) with the shared training loop.

A run is one process (small profile) or ``train.world_size`` data-parallel replicas (paper
profile: one per GPU the runtime gave the stage, torch DDP). Replicas draw the same seeded
global batch and each trains on its own slice of the rows, so the data order does not depend
on the number of replicas; DDP averages the gradients, and rank 0 logs and writes the outputs.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from components.common.devices import resolve_device, resolve_dtype
from components.common.io import read_json, save_torch, write_json_atomic
from components.common.train import fit
from components.dagmoe.corpus import eval_sets, load_tokens
from components.dagmoe.model import check_parameter_match, init_model, mean_loss, training_loss

CURVE_BATCH = 64  # windows per forward pass of the validation curve (speed only)
DDP_TIMEOUT = timedelta(minutes=30)
REPLICA_SECTIONS = ("model", "train")  # what a replica reads of the config


def take(tokens, index: torch.Tensor) -> torch.Tensor:
    """The ids at ``index`` as int64; ``tokens`` is a tensor, an array or a memory map (only
    the touched pages are read)."""
    if isinstance(tokens, torch.Tensor):
        return tokens[index].long()
    return torch.from_numpy(np.asarray(tokens[index.numpy()], dtype=np.int64))


def random_windows(tokens, context: int, batch_size: int, seed: int, rank: int = 0,
                   world: int = 1) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless batches of random (input, target) windows. The generator depends on the seed
    only, so every variant trained with the same seed sees the same batches in the same order;
    replica ``rank`` of ``world`` gets its contiguous share of each batch's rows."""
    if batch_size % world:
        raise ValueError(f"train.batch_size={batch_size} must be divisible by the {world} replicas")
    gen = torch.Generator().manual_seed(10_000 + seed)
    offsets = torch.arange(context + 1)
    rows = slice(rank * batch_size // world, (rank + 1) * batch_size // world)
    while True:
        starts = torch.randint(0, len(tokens) - context - 1, (batch_size,), generator=gen)
        windows = take(tokens, starts[rows, None] + offsets)
        yield windows[:, :-1], windows[:, 1:]


def eval_windows(tokens, context: int, max_tokens: int) -> torch.Tensor:
    """Non-overlapping (context+1)-token windows from the start of a validation stream."""
    n = min(len(tokens) - 1, max_tokens) // context
    starts = torch.arange(n) * context
    return take(tokens, starts[:, None] + torch.arange(context + 1))


def model_config_dict(m) -> dict:
    return m.model_dump() if hasattr(m, "model_dump") else dict(vars(m))


def resolve_world_size(t) -> int:
    """``train.world_size``, where 0 means one replica per visible GPU (at least one)."""
    if t.world_size > 0:
        return t.world_size
    return max(1, torch.cuda.device_count())


def train_stage(cfg, ctx) -> None:
    world = resolve_world_size(cfg.train)
    if world == 1:
        train_replica(cfg, ctx.inputs["build_corpus"], ctx.item, ctx)
    else:
        run_data_parallel(cfg, ctx, world)


def run_data_parallel(cfg, ctx, world: int) -> None:
    """Rank 0 runs here (it owns ``ctx``); ranks 1.. run as child interpreters started with
    ``subprocess`` (they die with this process: ``PR_SET_PDEATHSIG`` on Linux). All meet through
    a rendezvous file in a fresh temp folder (no port to pick); before it, rank 0 waits until
    every child is up, so a child that dies early fails the stage at once instead of leaving
    rank 0 at the rendezvous until its timeout."""
    corpus = Path(ctx.inputs["build_corpus"])
    with tempfile.TemporaryDirectory(prefix="dagmoe-ddp-") as tmp:
        rendezvous = str(Path(tmp) / "init")
        children = [_start_replica(cfg, corpus, ctx.item, r, world, rendezvous, Path(tmp))
                    for r in range(1, world)]
        try:
            await_replicas(children, Path(tmp))
            train_replica(cfg, corpus, ctx.item, ctx, rank=0, world=world, rendezvous=rendezvous)
        except BaseException:
            for child in children:
                child.kill()
            raise
        finally:
            codes = {r + 1: child.wait() for r, child in enumerate(children)}
    failed = {rank: code for rank, code in codes.items() if code}
    if failed:
        raise RuntimeError(f"train: data-parallel replicas failed (rank: exit code) {failed}")


def ready_file(tmp: Path, rank: int) -> Path:
    return tmp / f"ready{rank}"


def await_replicas(children: list[subprocess.Popen], tmp: Path, poll_s: float = 0.2,
                   timeout_s: float = DDP_TIMEOUT.total_seconds()) -> None:
    """Wait until every child replica has written its ready file (it is about to join the
    rendezvous); raise as soon as one exits before that, naming its rank and exit code."""
    deadline = time.monotonic() + timeout_s
    waiting = dict(enumerate(children, start=1))
    while waiting:
        for rank, child in list(waiting.items()):
            if ready_file(tmp, rank).exists():
                del waiting[rank]
            elif child.poll() is not None:
                raise RuntimeError(f"train: data-parallel replica {rank} exited with code "
                                   f"{child.returncode} before the rendezvous")
        if waiting and time.monotonic() > deadline:
            raise TimeoutError(f"train: replicas {sorted(waiting)} did not start in {timeout_s:.0f} s")
        if waiting:
            time.sleep(poll_s)


def _die_with_parent() -> None:
    """preexec_fn of a replica: the kernel kills it when the process that started it dies
    (Linux prctl PR_SET_PDEATHSIG = SIGKILL); elsewhere a no-op."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))


def _start_replica(cfg, corpus: Path, item: dict, rank: int, world: int, rendezvous: str,
                   tmp: Path) -> subprocess.Popen:
    spec = tmp / f"replica{rank}.json"
    sections = {name: getattr(cfg, name).model_dump(mode="json") for name in REPLICA_SECTIONS}
    write_json_atomic(spec, {"config": sections, "corpus": str(corpus),
                             "item": dict(item), "rank": rank, "world": world,
                             "rendezvous": rendezvous, "ready": str(ready_file(tmp, rank))})
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding components/
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.Popen([sys.executable, "-m", "components.dagmoe.train", str(spec)], env=env,
                            preexec_fn=_die_with_parent)


def replica_main(spec_path: str) -> None:
    """Entry of a replica child: ``python -m components.dagmoe.train SPEC.json``."""
    from types import SimpleNamespace

    from components.dagmoe.config import Model, Train

    spec = read_json(spec_path)
    cfg = SimpleNamespace(model=Model.model_validate(spec["config"]["model"]),
                          train=Train.model_validate(spec["config"]["train"]))
    train_replica(cfg, Path(spec["corpus"]), spec["item"], None, rank=spec["rank"],
                  world=spec["world"], rendezvous=spec["rendezvous"], ready=Path(spec["ready"]))


def replica_device(requested: str, rank: int, world: int) -> torch.device:
    """One process: the current device (the GPU the runtime reserved). Replicas: GPU ``rank``
    of those visible (under Ray, the stage's own GPUs)."""
    device = resolve_device(requested)
    if device.type == "cuda" and world > 1:
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    return device


def train_replica(cfg, corpus, item: dict, ctx, rank: int = 0, world: int = 1,
                  rendezvous: str | None = None, ready: Path | None = None) -> None:
    """One training run, or replica ``rank`` of ``world`` (DDP); only rank 0 gets ``ctx``.
    A child replica touches ``ready`` just before it joins the rendezvous."""
    t = cfg.train
    variant, seed = item["variant"], int(item["seed"])
    torch.set_num_threads(t.threads)  # fan-out instances share the cores
    device = replica_device(t.device, rank, world)
    if world > 1:
        import torch.distributed as dist

        if ready is not None:
            ready.touch()  # rank 0 waits for this before it joins the rendezvous
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank,
                                world_size=world, init_method=f"file://{rendezvous}",
                                timeout=DDP_TIMEOUT)
    try:
        _train(cfg, Path(corpus), variant, seed, ctx, device, rank, world)
    finally:
        if world > 1:
            dist.destroy_process_group()


def autocast_for(device: torch.device, precision: str):
    dtype = resolve_dtype(device, precision)
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def _train(cfg, corpus: Path, variant: str, seed: int, ctx, device: torch.device, rank: int,
           world: int) -> None:
    m, t = cfg.model, cfg.train
    tokens = load_tokens(corpus, "train")
    curve_set = next(name for name, domain in eval_sets(corpus).items() if domain == "id")
    curve_windows = eval_windows(load_tokens(corpus, curve_set), m.context, t.curve_tokens)
    vocab_size = _vocab_size(corpus)
    match = check_parameter_match(m, vocab_size, t.param_match_tolerance)

    model = init_model(variant, m, vocab_size, seed, t.common_init).to(device)
    trained = model
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        trained = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    batches = ((x.to(device), y.to(device))
               for x, y in random_windows(tokens, m.context, t.batch_size, seed, rank, world))

    def loss_fn(mod, batch):
        with autocast_for(device, t.precision):
            return training_loss(mod, batch, t.load_balance_coef, t.z_loss_coef)

    start = time.perf_counter()
    records = fit(trained, batches, loss_fn,
                  steps=t.steps, lr=t.lr, weight_decay=t.weight_decay, warmup=t.warmup,
                  grad_clip=t.grad_clip, ctx=ctx, log_every=t.log_every,
                  eval_fn=(lambda _: {"train/val_id_loss": mean_loss(model, curve_windows, CURVE_BATCH)})
                  if rank == 0 else None,
                  eval_every=t.curve_every)
    seconds = time.perf_counter() - start
    if rank == 0:
        _write_outputs(ctx, model, records, match, variant, seed, vocab_size, m,
                       {"seconds": seconds, "seconds_per_step": seconds / t.steps,
                        "world_size": world})


def _write_outputs(ctx, model, records, match, variant, seed, vocab_size, m, timing) -> None:
    save_torch(ctx.out_dir / "model.pt", {
        "variant": variant, "seed": seed, "vocab_size": vocab_size,
        "model_config": model_config_dict(m), "state_dict": model.state_dict()})
    write_json_atomic(ctx.out_dir / "history.json", records)
    losses = [r["train/loss"] for r in records]  # rank 0's share of each batch under DDP
    summary = {"params": match["params"][variant], "param_gap_dag_vs_shared": match["param_gap"],
               "train_loss_first": losses[0], "train_loss_final": losses[-1],
               **curve_flatness(records, "train/val_id_loss")}
    write_json_atomic(ctx.out_dir / "summary.json", {**summary, **timing})  # read by analyze_routing
    ctx.write_metrics(summary)  # deterministic given params + seed; timings go to MLflow only
    ctx.log_metrics(timing)


def curve_flatness(records: list[dict], key: str) -> dict[str, float]:
    """How much a logged curve still moved in the last quarter of training: the drop from the
    point nearest 3/4 of the steps to the end, absolutely and as a share of the whole drop."""
    curve = [(r["step"], r[key]) for r in records if key in r]
    if len(curve) < 3:
        return {}
    last_step = curve[-1][0]
    _, at_three_quarters = min(curve, key=lambda p: abs(p[0] - 0.75 * last_step))
    first, final = curve[0][1], curve[-1][1]
    drop = at_three_quarters - final
    return {"val_curve_first": first, "val_curve_final": final,
            "val_curve_last_quarter_drop": drop,
            "val_curve_last_quarter_share": drop / (first - final) if first != final else 0.0}


def _vocab_size(corpus_dir) -> int:
    return int(read_json(corpus_dir / "meta.json")["vocab_size"])


if __name__ == "__main__":
    replica_main(sys.argv[1])
