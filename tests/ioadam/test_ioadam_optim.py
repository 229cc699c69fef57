"""The IO-Adam optimizer against closed forms, torch.optim.Adam and its own reference mode."""

import pytest
import torch
from torch import nn

from components.ioadam.optim import (IOAdam, build_optimizer, formula_state_bytes, linear_weights,
                                     state_bytes)
from components.ioadam.tasks import CharLM, MLP, lm_loss


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))


def _step(model, optimizer, x, y):
    optimizer.zero_grad(set_to_none=True)
    ((model(x) - y) ** 2).mean().backward()
    optimizer.step()


@pytest.mark.parametrize("mode", ["reference", "fused"])
@pytest.mark.parametrize("width", [1, 3])
def test_first_step_with_one_token_equals_adam(mode, width):
    # bs = 1: (g x^T)^2 = g^2 (x^2)^T, so V_hat is exactly Adam's squared gradient at step 1
    adam_net, io_net = _mlp(), _mlp()
    adam = torch.optim.Adam(adam_net.parameters(), lr=1e-2)
    io = IOAdam(io_net, lr=1e-2, buffer_width=width, mode=mode)
    x, y = torch.randn(1, 5), torch.randn(1, 3)
    _step(adam_net, adam, x, y)
    _step(io_net, io, x, y)
    for p_adam, p_io in zip(adam_net.parameters(), io_net.parameters()):
        torch.testing.assert_close(p_io, p_adam, rtol=0, atol=1e-6)


def test_second_moment_upper_bounds_squared_gradient():
    # Cauchy-Schwarz: (sum_k g_ik x_jk)^2 <= (sum_k g_ik^2)(sum_k x_jk^2), per element
    torch.manual_seed(1)
    net = nn.Linear(6, 4, bias=False)
    io = IOAdam(net, lr=1e-3, mode="reference")
    x = torch.randn(32, 6)
    loss = net(x).sin().sum()
    loss.backward()
    grad = net.weight.grad.clone()
    io.step()
    state = io.state[net.weight]
    v_hat = (state["out_sq"] @ state["in_sq"].t()) / (1 - 0.999) ** 2
    assert torch.all(v_hat >= grad.square() * (1 - 1e-5))
    assert (v_hat > grad.square() * 1.01).any()       # strictly looser for a real batch


def test_fused_matches_reference_over_ten_steps():
    ref_net, fused_net = _mlp(3), _mlp(3)
    ref = IOAdam(ref_net, lr=3e-2, buffer_width=4, mode="reference")
    fused = IOAdam(fused_net, lr=3e-2, buffer_width=4, mode="fused")
    gen = torch.Generator().manual_seed(0)
    for _ in range(10):
        x, y = torch.randn(16, 5, generator=gen), torch.randn(16, 3, generator=gen)
        _step(ref_net, ref, x, y)
        _step(fused_net, fused, x, y)
    for layer_ref in linear_weights(ref_net):
        layer_fused = next(w for w in linear_weights(fused_net) if w.shape == layer_ref.shape)
        torch.testing.assert_close(fused.state[layer_fused]["exp_avg"], ref.state[layer_ref]["exp_avg"],
                                   rtol=1e-5, atol=1e-7)
    for p_ref, p_fused in zip(ref_net.parameters(), fused_net.parameters()):
        torch.testing.assert_close(p_fused, p_ref, rtol=1e-5, atol=1e-6)


def test_fused_mode_keeps_no_weight_gradient():
    net = _mlp()
    io = IOAdam(net, lr=1e-3, mode="fused")
    net(torch.randn(8, 5)).sum().backward()
    assert all(w.grad is None for w in linear_weights(net))
    assert all(m.bias.grad is not None for m in net if isinstance(m, nn.Linear))
    io.detach()
    net(torch.randn(8, 5)).sum().backward()          # plain nn.Linear again after detach
    assert all(w.grad is not None for w in linear_weights(net))


def test_fused_sums_over_every_token_of_a_sequence_model():
    # bs must count batch x sequence positions; a 3-D input must give the same moments as
    # the same tokens flattened into a 2-D batch
    seq_net, flat_net = _mlp(4), _mlp(4)
    seq_opt = IOAdam(seq_net, lr=1e-2, mode="fused")
    flat_opt = IOAdam(flat_net, lr=1e-2, mode="reference")
    x, y = torch.randn(2, 6, 5), torch.randn(2, 6, 3)
    _step(seq_net, seq_opt, x, y)
    _step(flat_net, flat_opt, x.reshape(12, 5), y.reshape(12, 3))
    for p_seq, p_flat in zip(seq_net.parameters(), flat_net.parameters()):
        torch.testing.assert_close(p_seq, p_flat, rtol=1e-5, atol=1e-7)


def test_buffer_columns_rotate_and_bias_correction_is_squared():
    net = nn.Linear(3, 2, bias=False)
    io = IOAdam(net, lr=1e-3, buffer_width=2, mode="reference")
    for _ in range(3):
        io.zero_grad()
        net(torch.ones(1, 3)).sum().backward()
        io.step()
    c = io.state[net.weight]["in_sq"]
    # column 0 written at steps 1 and 3, column 1 at step 2 (x^2 = 1 every time)
    beta2 = 0.999
    torch.testing.assert_close(c[:, 0], torch.full((3,), (1 - beta2) * (beta2 ** 2 + 1)))
    torch.testing.assert_close(c[:, 1], torch.full((3,), (1 - beta2) * beta2))


def test_state_bytes_match_formula_on_both_models():
    batch = torch.randint(0, 256, (2, 9))
    for model_fn, loss in ((lambda: MLP([64, 32, 10]), lambda m: m(torch.randn(4, 64)).sum()),
                           (lambda: CharLM(d_model=16, n_heads=2, n_layers=1, seq_len=8),
                            lambda m: lm_loss(m, batch))):
        for name in ("adam", "ioadam_b1", "ioadam_b4", "adafactor", "sgdm"):
            model = model_fn()
            opt = build_optimizer(name, model, lr=1e-3)
            opt.zero_grad()
            loss(model).backward()
            opt.step()
            shapes = [tuple(w.shape) for w in linear_weights(model)]
            assert state_bytes(opt, linear_weights(model)) == formula_state_bytes(name, shapes), name


def test_matrix_state_saving_of_digits_mlp():
    shapes = [(256, 64), (256, 256), (10, 256)]
    adam = formula_state_bytes("adam", shapes)
    assert 1 - formula_state_bytes("ioadam_b4", shapes) / adam >= 0.45
    assert 1 - formula_state_bytes("ioadam_b1", shapes) / adam >= 0.49


def test_fused_matches_reference_on_a_transformers_llama():
    """The paper profile's model: IO-Adam patches every nn.Linear of LlamaForCausalLM (attention,
    MLP, LM head); fused and reference modes must take the same steps."""
    from components.common.tiny_models import build_tiny

    nets = [build_tiny("llama", vocab_size=64, seed=5) for _ in range(2)]
    opts = [IOAdam(nets[0], lr=1e-2, buffer_width=2, mode="reference"),
            IOAdam(nets[1], lr=1e-2, buffer_width=2, mode="fused")]
    n_linear = sum(isinstance(m, nn.Linear) for m in nets[0].modules())
    assert len(opts[1].matrix_params()) == n_linear == 2 * 7 + 1     # q,k,v,o,gate,up,down per layer + head
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        batch = torch.randint(0, 64, (2, 9), generator=gen)
        for net, opt in zip(nets, opts):
            opt.zero_grad(set_to_none=True)
            lm_loss(net, batch).backward()
            opt.step()
    for p_ref, p_fused in zip(nets[0].parameters(), nets[1].parameters()):
        torch.testing.assert_close(p_fused, p_ref, rtol=1e-4, atol=1e-6)
    assert not torch.equal(nets[0].lm_head.weight, build_tiny("llama", vocab_size=64, seed=5).lm_head.weight)
