"""IO-Adam: Adam whose second moment is rebuilt from input and output-gradient statistics.

For a linear layer y = W x the weight gradient over a batch of tokens is G X^T
(G: output gradients n x bs, X: inputs m x bs). IO-Adam keeps Adam's full first moment M (n x m)
but, instead of an n x m second moment, it keeps two thin running sums:
  C (m x b): EMAs of the per-feature sums of squared inputs,
  R (n x b): EMAs of the per-unit sums of squared output gradients,
with only column (t mod b) receiving the new statistics at step t (all columns decay). The second
moment is V = R C^T, built only when the update is applied. Because V is a product of two EMAs its
bias correction is (1 - beta2^t)^2. By Cauchy-Schwarz V >= (G X^T)^2 at the first step, with
equality when the batch holds a single token.

Two modes:
  "reference": ordinary autograd fills W.grad; hooks only record the squared sums.
  "fused":     the linear layer's backward folds G X^T straight into M and returns no weight
               gradient, so no n x m gradient buffer ever exists (this is the memory saving).
               Gradient clipping cannot see these gradients, so it is unsupported in this mode.
Parameters that are not nn.Linear weights (biases, norms, embeddings) get plain Adam.
"""
from __future__ import annotations

import math
import types
from typing import Iterator

import torch
from torch import nn
from torch.nn import functional as F

MODES = ("reference", "fused")


class _LayerStats:
    """Per-step statistics gathered for one linear layer during backward."""

    def __init__(self, weight: nn.Parameter):
        self.weight = weight
        self.x_sq = torch.zeros(weight.shape[1], dtype=weight.dtype, device=weight.device)
        self.g_sq = torch.zeros(weight.shape[0], dtype=weight.dtype, device=weight.device)
        self.seen = False          # did backward reach this layer since the last step?
        self.optimizer: "IOAdam | None" = None

    def add_squares(self, grad_out: torch.Tensor, inputs: torch.Tensor) -> None:
        # Sum over every token position (batch x sequence), not just the batch dimension.
        self.g_sq += grad_out.reshape(-1, grad_out.shape[-1]).square().sum(0)
        self.x_sq += inputs.reshape(-1, inputs.shape[-1]).square().sum(0)
        self.seen = True

    def reset(self) -> None:
        self.x_sq.zero_()
        self.g_sq.zero_()
        self.seen = False


class _FusedLinear(torch.autograd.Function):
    """y = x W^T + b whose backward updates IO-Adam's first moment instead of returning dW."""

    @staticmethod
    def forward(ctx, x, weight, bias, stats):
        ctx.save_for_backward(x, weight)
        ctx.stats = stats
        ctx.has_bias = bias is not None
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight = ctx.saved_tensors
        stats: _LayerStats = ctx.stats
        stats.optimizer._fold_first_moment(stats, grad_out, x)
        grad_x = grad_out @ weight if ctx.needs_input_grad[0] else None
        grad_b = grad_out.reshape(-1, grad_out.shape[-1]).sum(0) if ctx.has_bias else None
        return grad_x, None, grad_b, None   # None for W: no weight-gradient buffer


class IOAdam(torch.optim.Optimizer):
    """IO-Adam for every ``nn.Linear`` of ``model``; plain Adam for its other parameters.

    Construct it from the model (it needs the layers, not just the parameters). Call
    :meth:`detach` to restore the layers' original behaviour.
    """

    def __init__(self, model: nn.Module, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, buffer_width: int = 4, mode: str = "fused"):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if buffer_width < 1:
            raise ValueError("buffer_width must be >= 1")
        params = [p for p in model.parameters() if p.requires_grad]
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.mode, self.buffer_width = mode, buffer_width
        self._stats: dict[nn.Parameter, _LayerStats] = {}
        self._handles: list = []
        self._patched: list[nn.Linear] = []
        for module in model.modules():
            if isinstance(module, nn.Linear) and module.weight.requires_grad:
                self._attach(module)

    # -- wiring -----------------------------------------------------------------------------
    def _attach(self, layer: nn.Linear) -> None:
        stats = _LayerStats(layer.weight)
        stats.optimizer = self
        self._stats[layer.weight] = stats
        if self.mode == "fused":
            def fused_forward(module, x):
                return _FusedLinear.apply(x, module.weight, module.bias, stats)
            layer.forward = types.MethodType(fused_forward, layer)
            self._patched.append(layer)
        else:
            self._handles.append(layer.register_forward_hook(_record_hook(stats)))

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        for layer in self._patched:
            del layer.forward            # falls back to nn.Linear.forward
        self._handles, self._patched = [], []

    def matrix_params(self) -> list[nn.Parameter]:
        return list(self._stats)

    # -- fused first moment (called from backward) ------------------------------------------
    def _fold_first_moment(self, stats: _LayerStats, grad_out: torch.Tensor, x: torch.Tensor) -> None:
        weight = stats.weight
        beta1 = self._group_of(weight)["betas"][0]
        state = self._io_state(weight)
        if not stats.seen:               # decay once per step even if the layer is called twice
            state["exp_avg"].mul_(beta1)
        g2d, x2d = grad_out.reshape(-1, grad_out.shape[-1]), x.reshape(-1, x.shape[-1])
        state["exp_avg"].addmm_(g2d.t(), x2d, alpha=1 - beta1)
        stats.add_squares(grad_out, x)

    def _group_of(self, param: nn.Parameter) -> dict:
        for group in self.param_groups:
            if any(p is param for p in group["params"]):
                return group
        raise KeyError("parameter not managed by this optimizer")

    def _io_state(self, weight: nn.Parameter) -> dict:
        state = self.state[weight]
        if not state:
            n, m = weight.shape
            b = self.buffer_width
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(weight, memory_format=torch.preserve_format)
            state["in_sq"] = torch.zeros(m, b, dtype=weight.dtype, device=weight.device)   # C
            state["out_sq"] = torch.zeros(n, b, dtype=weight.dtype, device=weight.device)  # R
        return state

    # -- the step ---------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param in self._stats:
                    self._io_step(param, group)
                elif param.grad is not None:
                    _adam_step(param, self.state[param], group)
        return loss

    def _io_step(self, weight: nn.Parameter, group: dict) -> None:
        stats = self._stats[weight]
        if not stats.seen:               # layer unused this step: nothing to learn from
            return
        beta1, beta2 = group["betas"]
        state = self._io_state(weight)
        if self.mode == "reference":
            state["exp_avg"].mul_(beta1).add_(weight.grad, alpha=1 - beta1)
        state["step"] += 1
        t = state["step"]
        col = (t - 1) % self.buffer_width
        for buf, fresh in ((state["in_sq"], stats.x_sq), (state["out_sq"], stats.g_sq)):
            buf.mul_(beta2)
            buf[:, col].add_(fresh, alpha=1 - beta2)
        stats.reset()
        if group["weight_decay"]:
            weight.mul_(1 - group["lr"] * group["weight_decay"])   # decoupled, never folded into G
        bias_c1 = 1 - beta1 ** t
        bias_c2 = (1 - beta2 ** t) ** 2                          # V is a product of two EMAs
        # V is built transiently for one layer at a time (n x m), then freed.
        denom = (state["out_sq"] @ state["in_sq"].t()).div_(bias_c2).sqrt_().add_(group["eps"])
        weight.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / bias_c1)


def _record_hook(stats: _LayerStats):
    """Forward hook (reference mode): once G arrives in backward, add the squared sums."""
    def hook(module, inputs, output):
        if torch.is_grad_enabled() and output.requires_grad:
            x = inputs[0].detach()
            output.register_hook(lambda grad_out: stats.add_squares(grad_out.detach(), x))
    return hook


def _adam_step(param: torch.Tensor, state: dict, group: dict) -> None:
    """Plain Adam (decoupled weight decay) for the parameters that are not Linear weights."""
    beta1, beta2 = group["betas"]
    if not state:
        state["step"] = 0
        state["exp_avg"] = torch.zeros_like(param)
        state["exp_avg_sq"] = torch.zeros_like(param)
    state["step"] += 1
    t = state["step"]
    grad = param.grad
    state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
    state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    if group["weight_decay"]:
        param.mul_(1 - group["lr"] * group["weight_decay"])
    denom = (state["exp_avg_sq"] / (1 - beta2 ** t)).sqrt_().add_(group["eps"])
    param.addcdiv_(state["exp_avg"], denom, value=-group["lr"] / (1 - beta1 ** t))


# -- optimizer factory and state accounting -----------------------------------------------------

def build_optimizer(name: str, model: nn.Module, lr: float, mode: str = "fused") -> torch.optim.Optimizer:
    """Optimizers of the comparison, by name: adam, ioadam_b<k>, adafactor, sgd, sgdm."""
    if name == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr)
    if name.startswith("ioadam_b"):
        return IOAdam(model, lr=lr, buffer_width=int(name.removeprefix("ioadam_b")), mode=mode)
    if name == "adafactor":
        return torch.optim.Adafactor(model.parameters(), lr=lr)   # row/column factored v, no momentum
    if name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr)
    if name == "sgdm":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    raise ValueError(f"unknown optimizer {name!r} (adam, ioadam_b<k>, adafactor, sgd, sgdm)")


def linear_weights(model: nn.Module) -> list[nn.Parameter]:
    return [m.weight for m in model.modules() if isinstance(m, nn.Linear)]


def state_bytes(optimizer: torch.optim.Optimizer, params: list[nn.Parameter] | None = None) -> int:
    """Bytes of the optimizer-state tensors (moments, factors, buffers) of ``params`` (all when
    None). Scalar step counters are left out: they are O(1) per parameter."""
    chosen = optimizer.state.keys() if params is None else params
    total = 0
    for param in chosen:
        for value in optimizer.state.get(param, {}).values():
            if torch.is_tensor(value) and value.dim() > 0:
                total += value.numel() * value.element_size()
    return total


def formula_state_bytes(name: str, shapes: list[tuple[int, int]], bytes_per_float: int = 4) -> int:
    """What ``state_bytes`` must count for the matrix params of the given (n, m) shapes."""
    if name == "adam":
        floats = sum(2 * n * m for n, m in shapes)
    elif name.startswith("ioadam_b"):
        b = int(name.removeprefix("ioadam_b"))
        floats = sum(n * m + b * (n + m) for n, m in shapes)
    elif name == "adafactor":
        floats = sum(n + m for n, m in shapes)
    elif name == "sgdm":
        floats = sum(n * m for n, m in shapes)
    elif name == "sgd":
        floats = 0
    else:
        raise ValueError(name)
    return floats * bytes_per_float


def iter_grads(model: nn.Module) -> Iterator[torch.Tensor]:
    return (p.grad for p in model.parameters() if p.grad is not None)


def grad_bytes(model: nn.Module) -> int:
    return sum(g.numel() * g.element_size() for g in iter_grads(model))


def relative_saving(value: float, reference: float) -> float:
    return 1.0 - value / reference if reference else math.nan
