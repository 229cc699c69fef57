"""Science checks of the MoE / DAG-MoE layers and the shared decoder."""
import itertools

import pytest
import torch
import torch.nn.functional as F

from components.common.train import fit
from components.common.transformer import count_parameters
from components.dagmoe.config import SPENT_SEEDS, DagmoeConfig, Model
from components.dagmoe.model import build_model, check_parameter_match, init_model, training_loss
from components.dagmoe.moe import (DagAggregation, DagRound, Experts, MoELayer, MoEShape,
                                   SumAggregation, dag_parameter_count, load_balance_loss,
                                   matched_shared_width)

@pytest.fixture(autouse=True)
def one_thread():
    # Tiny tensors: OpenMP threads only add synchronisation cost on a shared 2-core machine.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


SHAPE = MoEShape(d_model=16, n_experts=5, d_expert=12, top_k=3)


def tiny_model_config(**kw) -> Model:
    base = dict(d_model=16, n_layers=2, n_heads=2, context=8, n_experts=4, d_expert=24,
                top_k=2, d_graph=4, dag_rounds=2)
    return Model(**{**base, **kw})


def randomise(module: torch.nn.Module, seed: int = 0) -> None:
    """Give every parameter (including the zero-initialised W_up) a non-trivial value."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)


# ---------------------------------------------------------------------------- dispatch
def test_vectorised_dispatch_equals_naive_per_token_loop():
    torch.manual_seed(0)
    experts = Experts(SHAPE)
    randomise(experts)
    x = torch.randn(23, SHAPE.d_model)
    ids = torch.stack([torch.randperm(SHAPE.n_experts)[:SHAPE.top_k] for _ in range(len(x))])
    fast = experts(x, ids)
    for t, k in itertools.product(range(len(x)), range(SHAPE.top_k)):
        e = ids[t, k]
        ref = F.gelu(x[t] @ experts.w_in[e]) @ experts.w_out[e]
        torch.testing.assert_close(fast[t, k], ref, rtol=1e-5, atol=1e-6)


def test_moe_layer_equals_naive_weighted_sum_and_keeps_router_gradient():
    torch.manual_seed(1)
    layer = MoELayer(SHAPE, SumAggregation(SHAPE.d_model))
    randomise(layer)
    x, h = torch.randn(2, 7, SHAPE.d_model), torch.randn(2, 7, SHAPE.d_model)
    y = layer(x, residual=h)
    flat, flat_h = x.reshape(-1, SHAPE.d_model), h.reshape(-1, SHAPE.d_model)
    probs = (flat @ layer.router.proj.weight.T).softmax(-1)
    for t in range(len(flat)):
        gates, ids = probs[t].topk(SHAPE.top_k)
        ref = flat_h[t] + sum(g * (F.gelu(flat[t] @ layer.experts.w_in[e]) @ layer.experts.w_out[e])
                              for g, e in zip(gates, ids))
        torch.testing.assert_close(y.reshape(-1, SHAPE.d_model)[t], ref, rtol=1e-5, atol=1e-6)
    y.sum().backward()  # gates stay in the graph, so the router learns from the LM loss
    assert layer.router.proj.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------------------- routing
def test_router_probabilities_sum_to_one_and_gates_are_descending():
    layer = MoELayer(SHAPE, SumAggregation(SHAPE.d_model))
    gates, experts, probs, aux = layer.router(torch.randn(50, SHAPE.d_model))
    torch.testing.assert_close(probs.sum(-1), torch.ones(50))
    assert (gates[:, :-1] >= gates[:, 1:]).all()
    assert torch.isfinite(aux["z_loss"]) and aux["load_balance"] > 0
    renorm = MoELayer(MoEShape(**{**SHAPE.__dict__, "renormalize_topk": True}),
                      SumAggregation(SHAPE.d_model))
    gates, *_ = renorm.router(torch.randn(50, SHAPE.d_model))
    torch.testing.assert_close(gates.sum(-1), torch.ones(50))


def test_load_balance_loss_is_one_for_uniform_routing():
    n, k = 4, 2
    probs = torch.full((8, n), 1 / n)
    experts = torch.tensor([[0, 1], [2, 3]] * 4)  # every expert gets exactly T*K/N assignments
    assert load_balance_loss(probs, experts, n).item() == pytest.approx(1.0)
    skewed = torch.zeros(8, n); skewed[:, 0] = 1.0
    assert load_balance_loss(skewed, torch.zeros(8, k, dtype=torch.long), n).item() == pytest.approx(n)


# ---------------------------------------------------------------------------- DAG module
def test_dag_moe_layer_at_init_is_the_plain_moe_layer():
    """Zero up-projections: the K injected shares h/K add up to the one residual copy, so the
    DAG-MoE layer returns h + sum_k g_k E_k(x), the plain MoE layer, and nothing more."""
    torch.manual_seed(2)
    plain = MoELayer(SHAPE, SumAggregation(SHAPE.d_model))
    dag = MoELayer(SHAPE, DagAggregation(SHAPE.d_model, SHAPE.top_k, d_graph=4, rounds=2))
    dag.router.load_state_dict(plain.router.state_dict())
    dag.experts.load_state_dict(plain.experts.state_dict())
    h = 3.0 * torch.randn(3, 5, SHAPE.d_model)  # a stream far from unit scale
    x = F.layer_norm(h, (SHAPE.d_model,))
    torch.testing.assert_close(dag(x, residual=h), plain(x, residual=h), rtol=0, atol=1e-6)


def naive_dag_round(r: DagRound, nodes: torch.Tensor) -> torch.Tensor:
    """The round as written: explicit concatenation per (i, j) pair, loops over tokens and pairs."""
    out = nodes.clone()
    for t in range(nodes.shape[0]):
        d = r.down(r.norm(nodes[t]))
        for i in range(nodes.shape[1]):
            total = torch.zeros(r.d_graph)
            for j in range(nodes.shape[1]):
                f = torch.cat([d[i], d[j]])
                total = total + torch.sigmoid(r.edge(f)) * r.node(f)
            out[t, i] = nodes[t, i] + r.up(total)
    return out


@pytest.mark.parametrize("vector_gate", [False, True])
def test_vectorised_dag_round_equals_naive_pair_loop(vector_gate):
    r = DagRound(d_model=10, d_graph=4, vector_gate=vector_gate)
    randomise(r, seed=3)
    nodes = torch.randn(6, 3, 10)
    torch.testing.assert_close(r(nodes), naive_dag_round(r, nodes), rtol=1e-5, atol=1e-5)


def test_permutation_symmetry_of_both_aggregations():
    """The weighted sum is invariant to the order of the selected experts. The DAG round as
    specified (shared weights for every pair, messages from all K nodes) is permutation-
    equivariant over nodes, so after the final sum it is invariant too -- the notes' expectation
    of an order-dependent output does not follow from their equations (see CLAIMS.md). It is
    still a different, non-linear function of the K outputs, not the weighted sum."""
    torch.manual_seed(4)
    x, gates, outs = torch.randn(9, 16), torch.rand(9, 3), torch.randn(9, 3, 16)
    perm = torch.tensor([2, 0, 1])
    h = torch.randn(9, 16)
    plain = SumAggregation(16)
    torch.testing.assert_close(plain(x, gates, outs, h), plain(x, gates[:, perm], outs[:, perm], h))
    dag = DagAggregation(16, top_k=3, d_graph=4, rounds=2)
    randomise(dag, seed=5)  # a non-zero W_up, as after training
    torch.testing.assert_close(dag(x, gates, outs, h), dag(x, gates[:, perm], outs[:, perm], h))
    assert not torch.allclose(dag(x, gates, outs, h), plain(x, gates, outs, h), atol=1e-3)


# ---------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("vector_gate", [False, True])
@pytest.mark.parametrize("rounds", [1, 2])
def test_dag_parameter_count_matches_closed_form(vector_gate, rounds):
    dag = DagAggregation(96, top_k=2, d_graph=24, rounds=rounds, vector_gate=vector_gate)
    assert count_parameters(dag) == dag_parameter_count(96, 24, rounds, vector_gate)


def test_shared_expert_matches_dag_parameters_within_five_percent():
    small = DagmoeConfig().model
    width = matched_shared_width(small.d_model, small.d_graph, small.dag_rounds)
    shared = count_parameters(SumAggregation(small.d_model, width))
    dag = dag_parameter_count(small.d_model, small.d_graph, small.dag_rounds)
    assert abs(shared - dag) / dag <= 0.05
    report = check_parameter_match(small, vocab_size=1024, tolerance=0.05)
    assert report["param_gap"] <= 0.05
    assert report["params"]["moe"] < report["params"]["moe_shared"]


def test_small_profile_seeds_are_fresh():
    """The pre-registered seeds were never looked at by an earlier run or a calibration."""
    seeds = DagmoeConfig().seeds
    assert len(seeds) == 3 and not set(seeds) & SPENT_SEEDS


# ---------------------------------------------------------------------------- decoder
@pytest.mark.parametrize("variant", ["moe", "moe_shared", "dag_moe"])
def test_decoder_is_causal(variant):
    torch.manual_seed(6)
    model = build_model(variant, tiny_model_config(), vocab_size=30).eval()
    for block in model.blocks:
        randomise(block.ffn.aggregation, seed=7)
    idx = torch.randint(0, 30, (2, 8))
    changed = idx.clone(); changed[:, 5:] = (idx[:, 5:] + 1) % 30
    torch.testing.assert_close(model(idx)[:, :5], model(changed)[:, :5])
    assert not torch.allclose(model(idx)[:, 5:], model(changed)[:, 5:])


@pytest.mark.parametrize("variant", ["moe_shared", "dag_moe"])
def test_training_loss_is_finite_and_decreases(variant):
    torch.manual_seed(8)
    model = build_model(variant, tiny_model_config(), vocab_size=12)
    seq = torch.arange(9).repeat(4, 1) % 12  # a learnable pattern: next token = token + 1
    batch = (seq[:, :-1], seq[:, 1:])
    records = fit(model, iter(lambda: batch, None), lambda m, b: training_loss(m, b, 0.01, 1e-3),
                  steps=40, lr=1e-2, log_every=10)
    losses = [r["train/loss"] for r in records]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < 0.5 * losses[0]


def plain_moe_copy(dag_model: torch.nn.Module, cfg: Model, vocab_size: int) -> torch.nn.Module:
    """The plain MoE decoder with the DAG-MoE decoder's weights (all but the DAG rounds)."""
    plain = build_model("moe", cfg, vocab_size).eval()
    plain.load_state_dict({k: v for k, v in dag_model.state_dict().items() if ".rounds." not in k})
    return plain


def test_dag_moe_model_at_init_has_the_plain_moe_logits():
    """Regression test for the doubled residual: the default configuration, 3 blocks. Before
    the fix the DAG injected LN(h)/K while the block also added h, so the logits differed."""
    cfg = DagmoeConfig().model.model_copy(update={"n_layers": 3, "context": 16})
    torch.manual_seed(9)
    dag = build_model("dag_moe", cfg, 50).eval()
    idx = torch.randint(0, 50, (2, 16))
    torch.testing.assert_close(dag(idx), plain_moe_copy(dag, cfg, 50)(idx), rtol=0, atol=1e-5)


def test_dag_moe_residual_stream_does_not_grow_at_init():
    """The symptom of the old bug: one extra unit-RMS copy of LN(h) per layer. At init the
    DAG-MoE stream after every block has the plain MoE stream's RMS (the embeddings' ~0.03)."""
    cfg = tiny_model_config(n_layers=3)
    torch.manual_seed(10)
    dag = build_model("dag_moe", cfg, 20).eval()
    plain = plain_moe_copy(dag, cfg, 20)
    idx = torch.randint(0, 20, (2, 8))

    def stream_rms(model):
        h = model.tok_emb(idx) + model.pos_emb(torch.arange(8))
        out = []
        for block in model.blocks:
            h = block(h)
            out.append(h.pow(2).mean().sqrt().item())
        return out

    assert stream_rms(dag) == pytest.approx(stream_rms(plain), rel=1e-4)
    assert max(stream_rms(dag)) < 0.2


# ---------------------------------------------------------------------------- common random numbers
def test_arms_of_a_seed_start_from_the_same_network():
    """Common random numbers: with common_init every parameter an arm shares with the plain MoE
    has the plain MoE's value for that seed (the first versions drew each arm's whole network
    from its own stream, so the arms of a seed shared only the data order), so DAG-MoE starts as
    exactly the plain MoE of its seed and the shared-expert arm differs by its expert alone."""
    cfg = DagmoeConfig().model.model_copy(update={"n_layers": 3, "context": 16})
    idx = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    plain = init_model("moe", cfg, 50, seed=7).eval()
    common = plain.state_dict()
    for variant in ("moe_shared", "dag_moe"):
        model = init_model(variant, cfg, 50, seed=7).eval()
        own = [k for k in model.state_dict() if k not in common]
        assert own and all(".aggregation." in k for k in own)
        for key, value in common.items():
            assert torch.equal(model.state_dict()[key], value), (variant, key)
    # equal up to float rounding (the DAG adds h/K K times instead of h once)
    torch.testing.assert_close(init_model("dag_moe", cfg, 50, seed=7).eval()(idx), plain(idx),
                               rtol=0, atol=1e-5)
    # the arm-specific part is drawn too (a live shared expert), and seeds still differ
    shared = init_model("moe_shared", cfg, 50, seed=7)
    assert shared.blocks[0].ffn.aggregation.shared.up.weight.abs().sum() > 0
    assert not torch.equal(init_model("moe", cfg, 50, seed=8).tok_emb.weight, plain.tok_emb.weight)


def test_without_common_init_each_arm_draws_its_own_network():
    cfg = tiny_model_config(n_layers=2)
    torch.manual_seed(123)
    separate = init_model("moe_shared", cfg, 20, seed=3, common_init=False)
    torch.manual_seed(3)
    assert all(torch.equal(a, b) for a, b in
               zip(separate.state_dict().values(), build_model("moe_shared", cfg, 20).state_dict().values()))
    plain = init_model("moe", cfg, 20, seed=3)
    assert not torch.equal(separate.blocks[1].attn.qkv.weight, plain.blocks[1].attn.qkv.weight)
