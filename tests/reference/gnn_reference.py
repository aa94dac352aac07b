"""Independent PyTorch reference of the GNN layers gnnrt implements, written
from PyG 2.3's formulas with plain torch ops (PyG itself is not a
dependency), and of gnnrt's dropout masks. A job's model, optimizer and
train step built from them are gnn_jobs.py's. Importing this module has no
side effects.

Graph layout
  edge_index  int64 [2, E]; row 0 = source j, row 1 = target i. Messages flow
              j -> i and are aggregated at i.
  x           float [N, F]; every layer keeps x's dtype (float32 or float64).
  Linear weights are stored like torch.nn.Linear: [out, in], y = x W^T + b.

Layers (PyG 2.3 defaults; parameter names are PyG's state_dict names)
  GCNConv(in, out)
      A = E + one self loop per node (existing self loops are replaced; edge
      weight 1), deg_i = in-degree of i in A, norm_e = deg^-1/2[j] deg^-1/2[i]
      (inf -> 0), out_i = sum_{e=(j,i) in A} norm_e (x W^T)_j + bias.
      lin.weight [out, in] (no lin bias), bias [out].
  SAGEConv(in, out, aggr='mean'|'max')
      out_i = lin_l(aggr_{j->i} x_j) + lin_r(x_i); an empty neighbourhood
      aggregates to 0 for both mean and max.
      lin_l.weight [out, in], lin_l.bias [out], lin_r.weight [out, in].
  GATConv(in, C, heads=H, concat, negative_slope=0.2, dropout=p_att)
      h = x W^T viewed [N, H, C]; a_src = (h * att_src).sum(-1),
      a_dst = (h * att_dst).sum(-1); self loops removed, then one added per
      node (appended after the other edges); e = leaky_relu(a_src[j] +
      a_dst[i], 0.2); alpha = softmax of e over the edges into i (PyG's
      utils.softmax: minus the segment max, exp, / (segment sum + 1e-16));
      dropout(alpha, p_att) in training only; out_i = sum_e alpha_e h_j;
      concat -> [N, H*C], else mean over heads -> [N, C]; + bias.
      lin_src.weight [H*C, in] (no bias), att_src [1, H, C], att_dst [1, H, C],
      bias [H*C] (concat) or [C].
      PyG's state_dict also lists lin_dst.weight: for an int in_channels it
      is the same module as lin_src (an alias, not a second parameter).
  GINConv(nn, eps=0.0, train_eps=False)
      out_i = nn((1 + eps) x_i + sum_{j->i} x_j),
      nn = Linear(in, hidden) -> ReLU -> Linear(hidden, out).
      nn.0.weight [hidden, in], nn.0.bias [hidden], nn.2.weight [out, hidden],
      nn.2.bias [out]. eps is a buffer (state_dict key `eps`), not a parameter.

Models (two layers named conv1, conv2; each returns log_softmax [N, classes])
  gcn   dropout(x, p_in) -> conv1 -> relu -> dropout(p) -> conv2 -> log_softmax
  sage  dropout(x, p_in) -> conv1 -> relu -> dropout(p) -> conv2 -> log_softmax
        (SAGEConv, one aggr for both layers)
  gat   dropout(x, p) -> conv1 (H heads of `hidden`, concat, att dropout p)
        -> elu -> dropout(p) -> conv2 (out_heads heads, concat=False,
        att dropout p) -> log_softmax
  gin   conv1 (nn: in -> hidden -> hidden) -> relu -> dropout(p)
        -> conv2 (nn: hidden -> hidden -> classes) -> log_softmax
  Dropout is F.dropout, active only in model.train().

Initialisation (PyG's): GCN lin and GAT lin_src: glorot; att_src/att_dst:
glorot with PyG's bounds sqrt(6 / (size(-2) + size(-1))), i.e. sqrt(6/(H+C)),
not torch's xavier_uniform_ fans for a 3-D tensor; conv biases: zeros.
SAGEConv's lin_l/lin_r use PyG Linear's default initialiser, which is
torch.nn.Linear's (kaiming_uniform a=sqrt(5): U(+-1/sqrt(in)) for the weight,
U(+-1/sqrt(in)) for lin_l.bias), not glorot. GIN's nn.* are torch.nn.Linear.
The constructors draw from torch's global generator in PyG 2.3's order, so
that torch.manual_seed(s) before building a model gives the parameters PyG
would give: each Linear initialises itself when built and again in its
layer's reset_parameters() (GATConv resets lin_src twice, once as lin_dst;
GINConv re-initialises its nn). Not verified against PyG itself, which is
not installed here.

Aggregation: sum and mean with index_add, max with
scatter_reduce('amax', include_self=False) on zeros, as PyG 2.3 does on CPU.
Its backward splits the gradient of a tied maximum evenly between the ties
(torch_scatter would send it to one winner); inputs with continuous values
avoid ties.

Loss: mean NLL over the train_mask rows. Optimizers: torch.optim.Adam (L2
weight decay added to the gradient), AdamW (decoupled decay), SGD (momentum,
L2 weight decay, no dampening, no Nesterov).
"""
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

MODELS = ("gcn", "sage", "gat", "gin", "gcn_ln", "gcn_mse")
OPTIMIZERS = ("adam", "adamw", "sgd")


# --------------------------------------------------------------- initialisers
# torch_geometric.nn.inits; each draws one uniform_ from the global generator.


def glorot(t: Tensor) -> None:
    bound = math.sqrt(6.0 / (t.size(-2) + t.size(-1)))
    with torch.no_grad():
        t.uniform_(-bound, bound)


def kaiming_uniform(t: Tensor, fan: int, a: float) -> None:
    bound = math.sqrt(6.0 / ((1 + a * a) * fan))
    with torch.no_grad():
        t.uniform_(-bound, bound)


def uniform(size: int, t: Tensor) -> None:
    bound = 1.0 / math.sqrt(size)
    with torch.no_grad():
        t.uniform_(-bound, bound)


class Linear(nn.Module):
    """PyG's dense Linear: weight [out, in]; weight_initializer 'glorot' or
    None (kaiming_uniform a=sqrt(5)); bias U(+-1/sqrt(in)). Initialises
    itself when built, like PyG's."""

    def __init__(self, in_channels: int, out_channels: int, bias: bool = True,
                 weight_initializer: str = None):
        super().__init__()
        self.in_channels = in_channels
        self.weight_initializer = weight_initializer
        self.weight = nn.Parameter(torch.empty(out_channels, in_channels))
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight_initializer == "glorot":
            glorot(self.weight)
        elif self.weight_initializer is None:
            kaiming_uniform(self.weight, fan=self.in_channels, a=math.sqrt(5))
        else:
            raise ValueError(f"Linear: unknown weight_initializer {self.weight_initializer!r}")
        if self.bias is not None:
            uniform(self.in_channels, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)


# ------------------------------------------------------------ graph utilities


def with_self_loops(edge_index: Tensor, num_nodes: int) -> Tensor:
    """Drops existing self loops and adds one per node: GATConv's
    remove_self_loops + add_self_loops and, for unit edge weights, GCN's
    add_remaining_self_loops. Numbered as gnnrt numbers this graph
    (model::self_loop_ids): in destination order, each node's incoming
    edges in the given order, then its loop (attention dropout draws by
    these ids)."""
    keep = edge_index[0] != edge_index[1]
    loops = torch.arange(num_nodes, dtype=edge_index.dtype).expand(2, num_nodes)
    both = torch.cat([edge_index[:, keep], loops], dim=1)
    is_loop = torch.cat([torch.zeros(int(keep.sum()), dtype=both.dtype),
                         torch.ones(num_nodes, dtype=both.dtype)])
    _, order = torch.sort(both[1] * 2 + is_loop, stable=True)
    return both[:, order]


def in_degree(dst: Tensor, num_nodes: int) -> Tensor:
    return torch.bincount(dst, minlength=num_nodes)


def _rows(v: Tensor, like: Tensor) -> Tensor:
    """[N] -> [N, 1, ...] broadcastable against `like`'s trailing dims."""
    return v.view((-1,) + (1,) * (like.dim() - 1))


def scatter_sum(src: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """out[i] = sum of src[e] over e with index[e] == i; src [E, ...]."""
    out = src.new_zeros((num_nodes,) + tuple(src.shape[1:]))
    return out.index_add(0, index, src)


def scatter_mean(src: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """Sum divided by max(count, 1): an empty segment gives 0."""
    count = in_degree(index, num_nodes).clamp(min=1).to(src.dtype)
    return scatter_sum(src, index, num_nodes) / _rows(count, src)


def scatter_max(src: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """Elementwise max per segment; an empty segment gives 0."""
    idx = _rows(index, src).expand_as(src)
    out = src.new_zeros((num_nodes,) + tuple(src.shape[1:]))
    with warnings.catch_warnings():  # torch 1.13 flags scatter_reduce as beta
        warnings.simplefilter("ignore", UserWarning)
        out = out.scatter_reduce(0, idx, src, "amax", include_self=False)
    # include_self=False already leaves untouched rows at their zero start;
    # the explicit fill states the contract instead of relying on that.
    empty = in_degree(index, num_nodes) == 0
    return out.masked_fill(_rows(empty, out), 0.0)


def winner_reduce(msg: Tensor, index: Tensor, n: int, reduce: str):
    """torch_scatter's max/min: the value per (n, f) and the lowest edge id
    that attains it (E for an empty segment, whose value is 0)."""
    e, f = msg.shape
    amax = "amax" if reduce == "max" else "amin"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        out = msg.new_zeros(n, f).scatter_reduce(0, index[:, None].expand(e, f), msg, amax,
                                                 include_self=False)
        counts = msg.new_zeros(n).index_add_(0, index, msg.new_ones(e))
        out = torch.where(counts[:, None] > 0, out, msg.new_zeros(()))
        hit = msg == out[index]
        cand = torch.where(hit, torch.arange(e)[:, None].expand(e, f), torch.full((e, f), e))
        arg = torch.full((n, f), e, dtype=torch.int64).scatter_reduce(
            0, index[:, None].expand(e, f), cand, "amin", include_self=True)
    return out, arg


class WinnerReduce(torch.autograd.Function):
    """max/min whose backward sends each output element's gradient to one
    winner, the lowest edge id among tied maxima (torch_scatter's rule, and
    gnnrt's); torch's own scatter_reduce backward splits it among ties."""

    @staticmethod
    def forward(ctx, msg, index, n, reduce):
        out, arg = winner_reduce(msg.detach(), index, n, reduce)
        ctx.save_for_backward(arg)
        ctx.e = msg.shape[0]
        return out, arg

    @staticmethod
    def backward(ctx, grad_out, _grad_arg):
        (arg,) = ctx.saved_tensors
        grad = grad_out.new_zeros(ctx.e + 1, grad_out.shape[1])  # row e collects empty segments
        grad.scatter_(0, arg, grad_out)
        return grad[:ctx.e], None, None, None


def scatter_max_winner(src: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    return WinnerReduce.apply(src, index, num_nodes, "max")[0]


SCATTER = {"sum": scatter_sum, "mean": scatter_mean, "max": scatter_max,
           "max_winner": scatter_max_winner}


def segment_softmax(src: Tensor, index: Tensor, num_nodes: int) -> Tensor:
    """PyG's utils.softmax over the entries of src [E, H] grouped by index.
    The max is taken from a detached copy, as PyG does: softmax does not
    depend on the shift, so no gradient flows through it."""
    seg_max = scatter_max(src.detach(), index, num_nodes)
    out = (src - seg_max.index_select(0, index)).exp()
    seg_sum = scatter_sum(out, index, num_nodes) + 1e-16
    return out / seg_sum.index_select(0, index)


# --------------------------------------------------------------------- layers


class GCNConv(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, bias: bool = True):
        super().__init__()
        self.lin = Linear(in_channels, out_channels, bias=False, weight_initializer="glorot")
        self.bias = nn.Parameter(torch.empty(out_channels)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        n = x.size(0)
        # PyG recomputes the normalisation on every call (cached=False).
        src, dst = with_self_loops(edge_index, n)
        deg_inv_sqrt = in_degree(dst, n).to(x.dtype).pow(-0.5)
        deg_inv_sqrt = deg_inv_sqrt.masked_fill(torch.isinf(deg_inv_sqrt), 0.0)
        norm = deg_inv_sqrt[src] * deg_inv_sqrt[dst]
        h = self.lin(x)
        out = scatter_sum(norm.view(-1, 1) * h.index_select(0, src), dst, n)
        return out if self.bias is None else out + self.bias


class SAGEConv(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, aggr: str = "mean"):
        super().__init__()
        if aggr not in ("mean", "max", "max_winner"):
            raise ValueError(f"SAGEConv: aggr must be 'mean', 'max' or 'max_winner', got {aggr!r}")
        self.aggr = aggr
        self.lin_l = Linear(in_channels, out_channels, bias=True)
        self.lin_r = Linear(in_channels, out_channels, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin_l.reset_parameters()
        self.lin_r.reset_parameters()

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        src, dst = edge_index
        agg = SCATTER[self.aggr](x.index_select(0, src), dst, x.size(0))
        return self.lin_l(agg) + self.lin_r(x)


class GATConv(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, heads: int = 1,
                 concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0,
                 bias: bool = True, attention_dropout=None):
        super().__init__()
        self.heads, self.out_channels = heads, out_channels
        self.concat = concat
        self.negative_slope = negative_slope
        self.dropout = dropout
        # attention_dropout(alpha [E, H]) replaces F.dropout when given.
        self.attention_dropout = attention_dropout
        self.lin_src = Linear(in_channels, heads * out_channels, bias=False,
                              weight_initializer="glorot")
        self.lin_dst = self.lin_src  # PyG's alias for an int in_channels
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = (nn.Parameter(torch.empty(heads * out_channels if concat else out_channels))
                     if bias else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # lin_dst is lin_src: resetting both draws lin_src's weight twice,
        # which keeps the generator in step with PyG.
        self.lin_src.reset_parameters()
        self.lin_dst.reset_parameters()
        glorot(self.att_src)
        glorot(self.att_dst)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        n, H, C = x.size(0), self.heads, self.out_channels
        h = self.lin_src(x).view(n, H, C)
        a_src = (h * self.att_src).sum(dim=-1)  # [N, H]
        a_dst = (h * self.att_dst).sum(dim=-1)
        src, dst = with_self_loops(edge_index, n)
        e = F.leaky_relu(a_src.index_select(0, src) + a_dst.index_select(0, dst),
                         self.negative_slope)
        alpha = segment_softmax(e, dst, n)
        if self.attention_dropout is not None:
            alpha = self.attention_dropout(alpha) if self.training else alpha
        else:
            alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        out = scatter_sum(h.index_select(0, src) * alpha.unsqueeze(-1), dst, n)  # [N, H, C]
        out = out.reshape(n, H * C) if self.concat else out.mean(dim=1)
        return out if self.bias is None else out + self.bias


class GINConv(nn.Module):
    def __init__(self, mlp: nn.Module, eps: float = 0.0, train_eps: bool = False):
        super().__init__()
        self.nn = mlp
        self.initial_eps = eps
        if train_eps:
            self.eps = nn.Parameter(torch.tensor([eps]))
        else:
            self.register_buffer("eps", torch.tensor([eps]))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # PyG's inits.reset(nn): a Sequential has no reset_parameters, so each
        # child that has one is re-initialised, in order.
        for layer in self.nn.children():
            if hasattr(layer, "reset_parameters"):
                layer.reset_parameters()
        with torch.no_grad():
            self.eps.fill_(self.initial_eps)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        src, dst = edge_index
        out = scatter_sum(x.index_select(0, src), dst, x.size(0))
        return self.nn(out + (1 + self.eps) * x)


class LayerNorm(nn.Module):
    """PyG's LayerNorm(in_channels, eps=1e-5, affine=True, mode): mode 'graph'
    (PyG's default) normalises over all nodes and channels of the (single)
    graph, out = (x - mean(x)) / (std(x, unbiased=False) + eps); mode 'node'
    is F.layer_norm over each node's channels. Then out * weight + bias
    (weight ones, bias zeros at initialisation)."""

    def __init__(self, channels: int, mode: str = "graph", eps: float = 1e-5):
        super().__init__()
        self.mode, self.eps = mode, eps
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: Tensor) -> Tensor:
        if self.mode == "node":
            return F.layer_norm(x, (x.size(-1),), self.weight, self.bias, self.eps)
        x = x - x.mean()
        out = x / (x.std(unbiased=False) + self.eps)
        return out * self.weight + self.bias


def gin_mlp(in_channels: int, hidden: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_channels, hidden), nn.ReLU(), nn.Linear(hidden, out_channels))


# --------------------------------------------------------------------- models


class GCN(nn.Module):
    def __init__(self, in_channels, hidden, out_channels, dropout=0.5, input_dropout=None):
        super().__init__()
        self.p = dropout
        self.p_in = dropout if input_dropout is None else input_dropout
        self.conv1 = GCNConv(in_channels, hidden)
        self.conv2 = GCNConv(hidden, out_channels)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=self.p_in, training=self.training)
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.p, training=self.training)
        return F.log_softmax(self.conv2(x, edge_index), dim=-1)


class GCNNorm(nn.Module):
    """GCN with a LayerNorm after conv1 (norm1), and optionally raw outputs
    for a regression loss (log_softmax=False)."""

    def __init__(self, in_channels, hidden, out_channels, dropout=0.5, norm_mode="graph",
                 log_softmax=True):
        super().__init__()
        self.p = dropout
        self.conv1 = GCNConv(in_channels, hidden)
        self.norm1 = LayerNorm(hidden, norm_mode) if norm_mode else None
        self.conv2 = GCNConv(hidden, out_channels)
        self.log_softmax = log_softmax

    def forward(self, x, edge_index):
        x = F.dropout(x, p=self.p, training=self.training)
        x = self.conv1(x, edge_index)
        if self.norm1 is not None:
            x = self.norm1(x)
        x = F.dropout(F.relu(x), p=self.p, training=self.training)
        x = self.conv2(x, edge_index)
        return F.log_softmax(x, dim=-1) if self.log_softmax else x


class SAGE(nn.Module):
    def __init__(self, in_channels, hidden, out_channels, dropout=0.5, input_dropout=None,
                 aggr="mean"):
        super().__init__()
        self.p = dropout
        self.p_in = dropout if input_dropout is None else input_dropout
        self.conv1 = SAGEConv(in_channels, hidden, aggr)
        self.conv2 = SAGEConv(hidden, out_channels, aggr)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=self.p_in, training=self.training)
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.p, training=self.training)
        return F.log_softmax(self.conv2(x, edge_index), dim=-1)


class GAT(nn.Module):
    """`hidden` is the width of one head; conv1 outputs heads * hidden."""

    def __init__(self, in_channels, hidden, out_channels, heads=8, out_heads=1, dropout=0.6):
        super().__init__()
        self.p = dropout
        self.conv1 = GATConv(in_channels, hidden, heads=heads, concat=True, dropout=dropout)
        self.conv2 = GATConv(heads * hidden, out_channels, heads=out_heads, concat=False,
                             dropout=dropout)

    def forward(self, x, edge_index):
        x = F.dropout(x, p=self.p, training=self.training)
        x = F.elu(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.p, training=self.training)
        return F.log_softmax(self.conv2(x, edge_index), dim=-1)


class GIN(nn.Module):
    def __init__(self, in_channels, hidden, out_channels, dropout=0.5, eps=0.0):
        super().__init__()
        self.p = dropout
        # Each nn is built, then re-initialised by its GINConv, as in PyG.
        self.conv1 = GINConv(gin_mlp(in_channels, hidden, hidden), eps=eps)
        self.conv2 = GINConv(gin_mlp(hidden, hidden, out_channels), eps=eps)

    def forward(self, x, edge_index):
        x = F.relu(self.conv1(x, edge_index))
        x = F.dropout(x, p=self.p, training=self.training)
        return F.log_softmax(self.conv2(x, edge_index), dim=-1)


def build_model(name: str, in_channels: int, hidden: int, out_channels: int, *,
                dropout: float = 0.5, input_dropout: float = None, aggr: str = "mean",
                heads: int = 8, out_heads: int = 1, eps: float = 0.0,
                norm_mode: str = "graph") -> nn.Module:
    """Builds one of MODELS from the global torch generator (seed it first);
    parameters are float32 as in PyG. Arguments a model does not use are
    ignored."""
    if name == "gcn":
        return GCN(in_channels, hidden, out_channels, dropout, input_dropout)
    if name == "sage":
        return SAGE(in_channels, hidden, out_channels, dropout, input_dropout, aggr)
    if name == "gat":
        return GAT(in_channels, hidden, out_channels, heads, out_heads, dropout)
    if name == "gin":
        return GIN(in_channels, hidden, out_channels, dropout, eps)
    if name == "gcn_ln":
        return GCNNorm(in_channels, hidden, out_channels, dropout, norm_mode)
    if name == "gcn_mse":
        return GCNNorm(in_channels, hidden, out_channels, dropout, None, log_softmax=False)
    raise ValueError(f"build_model: unknown model {name!r} (expected one of {MODELS})")


def make_optimizer(name: str, params, lr: float, weight_decay: float = 0.0,
                   momentum: float = 0.0) -> torch.optim.Optimizer:
    """torch's defaults otherwise: betas (0.9, 0.999), eps 1e-8, amsgrad off;
    SGD without dampening or Nesterov."""
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    raise ValueError(f"make_optimizer: unknown optimizer {name!r} (expected one of {OPTIMIZERS})")


# ------------------------------------------------------------- gnnrt jobs
# A model described as a gnnrt job's model (job.proto's Model as a dict:
# {"layer": [{"type": "gcn", "out": 16, ...}, ...], "loss": ...}), built
# from the layers above with the job's naming (conv1, lin1, norm1 counted by
# kind) and defaults. Dropout draws gnnrt's documented masks (ops/dropout.h)
# with the Threefry4x32-20 below, so a run with p > 0 is reproducible here:
# element (row, col) of a [rows, cols] input to a dropout keyed `key` at
# optimizer step `step` has the flat index k = row * cols + col and is kept
# when its uniform u >= p, u = word (k // 16) % 4 of Threefry4x32-20 with key
# (seed low 32 bits, seed high, key, step low) and counter (d low, d high, 0,
# step high), d = (k // 64) * 16 + k % 16, over 2^32. Rows are node ids, or
# edge ids of the self-loop graph for GAT's attention.

# Threefry4x32-20 (Salmon et al., "Parallel random numbers: as easy as 1,
# 2, 3", SC'11), written from the paper's description in NumPy: 20 rounds of
# add-rotate-xor on four 32-bit words, the key injected every four rounds.
THREEFRY_ROTATIONS = [(10, 26), (11, 21), (13, 27), (23, 5), (6, 20), (17, 11), (25, 10), (18, 20)]
THREEFRY_PARITY = 0x1BD11BDA


def threefry4x32(key, counter: np.ndarray) -> np.ndarray:
    """Threefry4x32-20 of counters [..., 4] under key (four 32-bit ints): words [..., 4] uint32."""
    m = np.uint64(0xFFFFFFFF)
    ks = [np.uint64(k) for k in key] + [np.uint64(THREEFRY_PARITY ^ key[0] ^ key[1] ^ key[2] ^ key[3])]
    x = [(np.asarray(counter[..., i], np.uint64) + ks[i]) & m for i in range(4)]

    def rotl(v, r):
        return ((v << np.uint64(r)) | (v >> np.uint64(32 - r))) & m

    for rnd in range(20):
        r0, r1 = THREEFRY_ROTATIONS[rnd % 8]
        a, b = (1, 3) if rnd % 2 == 0 else (3, 1)  # words mixed into x0 and x2
        x[0] = (x[0] + x[a]) & m
        x[a] = rotl(x[a], r0) ^ x[0]
        x[2] = (x[2] + x[b]) & m
        x[b] = rotl(x[b], r1) ^ x[2]
        if rnd % 4 == 3:
            s = rnd // 4 + 1
            for i in range(4):
                x[i] = (x[i] + ks[(s + i) % 5]) & m
            x[3] = (x[3] + np.uint64(s)) & m
    return np.stack(x, axis=-1).astype(np.uint32)


# Random123's known answers for threefry4x32 with 20 rounds (its
# kat_vectors): (counter, key, words). Checked on import.
THREEFRY_KAT = [
    ([0] * 4, [0] * 4, [0x9c6ca96a, 0xe17eae66, 0xfc10ecd4, 0x5256a7d8]),
    ([0xffffffff] * 4, [0xffffffff] * 4, [0x2a881696, 0x57012287, 0xf6c7446e, 0xa16a6732]),
    ([0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344], [0xa4093822, 0x299f31d0, 0x082efa98, 0xec4e6c89],
     [0x59cd1dbb, 0xb8879579, 0x86b5d00c, 0xac8b6d84]),
]
for _ctr, _key, _words in THREEFRY_KAT:
    assert threefry4x32(_key, np.array([_ctr], np.uint64))[0].tolist() == _words, "threefry4x32 known answer"


def dropout_uniforms(seed: int, step: int, key: int, rows, cols: int) -> np.ndarray:
    """The uniforms [len(rows), cols] of gnnrt's dropout mask for global rows `rows`."""
    rows = np.asarray(rows, np.uint64).reshape(-1)
    low = 0xFFFFFFFF
    k = rows[:, None] * np.uint64(cols) + np.arange(cols, dtype=np.uint64)[None, :]
    d = (k // np.uint64(64)) * np.uint64(16) + k % np.uint64(16)
    word = (k // np.uint64(16)) % np.uint64(4)
    ctr = np.zeros(k.shape + (4,), np.uint64)
    ctr[..., 0] = d & np.uint64(low)
    ctr[..., 1] = d >> np.uint64(32)
    ctr[..., 3] = step >> 32
    words = threefry4x32([seed & low, seed >> 32, key, step & low], ctr)
    picked = np.take_along_axis(words, word.astype(np.int64)[..., None], axis=-1)[..., 0]
    return picked.astype(np.float64) / 4294967296.0


def dropout_mask(rows: int, cols: int, p: float, seed: int, step: int, key: int) -> np.ndarray:
    """keep / (1 - p) per element, float64 [rows, cols]."""
    if p >= 1:
        return np.zeros((rows, cols))
    return (dropout_uniforms(seed, step, key, np.arange(rows), cols) >= p) / (1.0 - p)
