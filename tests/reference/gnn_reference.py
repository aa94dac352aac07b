"""Independent PyTorch reference of the GNN layers and the train step that
gnnrt's trainer implements, written from PyG 2.3's formulas with plain torch
ops (PyG itself is not a dependency). Importing this module has no side
effects.

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
    """Drops existing self loops and appends one per node, in node order.
    This is GATConv's remove_self_loops + add_self_loops and, for unit edge
    weights, GCN's add_remaining_self_loops (same edge order too)."""
    keep = edge_index[0] != edge_index[1]
    loops = torch.arange(num_nodes, dtype=edge_index.dtype).expand(2, num_nodes)
    return torch.cat([edge_index[:, keep], loops], dim=1)


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


SCATTER = {"sum": scatter_sum, "mean": scatter_mean, "max": scatter_max}


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
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.lin = Linear(in_channels, out_channels, bias=False, weight_initializer="glorot")
        self.bias = nn.Parameter(torch.empty(out_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lin.reset_parameters()
        nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        n = x.size(0)
        # PyG recomputes the normalisation on every call (cached=False).
        src, dst = with_self_loops(edge_index, n)
        deg_inv_sqrt = in_degree(dst, n).to(x.dtype).pow(-0.5)
        deg_inv_sqrt = deg_inv_sqrt.masked_fill(torch.isinf(deg_inv_sqrt), 0.0)
        norm = deg_inv_sqrt[src] * deg_inv_sqrt[dst]
        h = self.lin(x)
        return scatter_sum(norm.view(-1, 1) * h.index_select(0, src), dst, n) + self.bias


class SAGEConv(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, aggr: str = "mean"):
        super().__init__()
        if aggr not in ("mean", "max"):
            raise ValueError(f"SAGEConv: aggr must be 'mean' or 'max', got {aggr!r}")
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
                 concat: bool = True, negative_slope: float = 0.2, dropout: float = 0.0):
        super().__init__()
        self.heads, self.out_channels = heads, out_channels
        self.concat = concat
        self.negative_slope = negative_slope
        self.dropout = dropout
        self.lin_src = Linear(in_channels, heads * out_channels, bias=False,
                              weight_initializer="glorot")
        self.lin_dst = self.lin_src  # PyG's alias for an int in_channels
        self.att_src = nn.Parameter(torch.empty(1, heads, out_channels))
        self.att_dst = nn.Parameter(torch.empty(1, heads, out_channels))
        self.bias = nn.Parameter(torch.empty(heads * out_channels if concat else out_channels))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # lin_dst is lin_src: resetting both draws lin_src's weight twice,
        # which keeps the generator in step with PyG.
        self.lin_src.reset_parameters()
        self.lin_dst.reset_parameters()
        glorot(self.att_src)
        glorot(self.att_dst)
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
        alpha = F.dropout(alpha, p=self.dropout, training=self.training)
        out = scatter_sum(h.index_select(0, src) * alpha.unsqueeze(-1), dst, n)  # [N, H, C]
        out = out.reshape(n, H * C) if self.concat else out.mean(dim=1)
        return out + self.bias


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


# ------------------------------------------------------------------- training


@dataclass
class Graph:
    """One data set in the layout of /work/shared/datasets (see its README)."""
    x: Tensor           # float [N, F]
    y: Tensor           # int64 [N]
    edge_index: Tensor  # int64 [2, E]
    train_mask: Tensor  # bool [N]
    val_mask: Tensor
    test_mask: Tensor

    @property
    def num_nodes(self) -> int:
        return self.x.size(0)

    @property
    def num_features(self) -> int:
        return self.x.size(1)

    @property
    def num_classes(self) -> int:
        return int(self.y.max()) + 1

    def to(self, dtype: torch.dtype) -> "Graph":
        """The same graph with x in `dtype` (labels and indices unchanged)."""
        return Graph(self.x.to(dtype), self.y, self.edge_index,
                     self.train_mask, self.val_mask, self.test_mask)


GRAPH_FILES = {"x": np.float32, "y": np.int64, "edge_index": np.int64,
               "train_mask": np.bool_, "val_mask": np.bool_, "test_mask": np.bool_}


def load_dataset(folder: Union[str, Path]) -> Graph:
    folder = Path(folder)
    arrays = {}
    for name, dtype in GRAPH_FILES.items():
        path = folder / f"{name}.npy"
        a = np.load(path)
        if a.dtype != dtype:
            raise ValueError(f"load_dataset: {path} has dtype {a.dtype}, "
                             f"expected {np.dtype(dtype)}")
        arrays[name] = torch.from_numpy(np.ascontiguousarray(a))
    g = Graph(**arrays)
    n = g.x.size(0)
    if g.edge_index.dim() != 2 or g.edge_index.size(0) != 2:
        raise ValueError(f"load_dataset: {folder}/edge_index.npy has shape "
                         f"{tuple(g.edge_index.shape)}, expected [2, E]")
    if g.edge_index.numel() and not (0 <= int(g.edge_index.min()) and int(g.edge_index.max()) < n):
        raise ValueError(f"load_dataset: {folder}/edge_index.npy has ids outside [0, {n})")
    return g


def save_dataset(g: Graph, folder: Union[str, Path]) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, dtype in GRAPH_FILES.items():
        np.save(folder / f"{name}.npy", getattr(g, name).numpy().astype(dtype))


def named_params(model: nn.Module) -> Dict[str, Tensor]:
    """The trainable parameters by PyG name (aliases such as GAT's lin_dst
    and buffers such as GIN's eps are not included)."""
    return {name: p for name, p in model.named_parameters()}


def save_params(params: Union[nn.Module, Mapping[str, Tensor]], folder: Union[str, Path]) -> None:
    """One float32 <name>.npy per parameter, e.g. conv1.lin.weight.npy."""
    if isinstance(params, nn.Module):
        params = named_params(params)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, t in params.items():
        np.save(folder / f"{name}.npy", t.detach().cpu().numpy().astype(np.float32))


def load_params(folder: Union[str, Path]) -> Dict[str, Tensor]:
    folder = Path(folder)
    return {p.name[:-len(".npy")]: torch.from_numpy(np.load(p))
            for p in sorted(folder.glob("*.npy"))}


def assign_params(model: nn.Module, params: Mapping[str, Tensor]) -> None:
    """Copies params into the model (converted to each parameter's dtype);
    the names must match the model's parameters exactly."""
    own = named_params(model)
    missing, extra = sorted(set(own) - set(params)), sorted(set(params) - set(own))
    if missing or extra:
        raise KeyError(f"assign_params: missing {missing}, unexpected {extra}")
    with torch.no_grad():
        for name, p in own.items():
            if tuple(params[name].shape) != tuple(p.shape):
                raise ValueError(f"assign_params: {name} has shape {tuple(params[name].shape)}, "
                                 f"model expects {tuple(p.shape)}")
            p.copy_(params[name])


def masked_mse_loss(out: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    """Mean squared error against one-hot labels over the masked rows (mean
    over rows x classes, as F.mse_loss)."""
    target = F.one_hot(y[mask], out.size(1)).to(out.dtype)
    return F.mse_loss(out[mask], target)


def masked_nll_loss(logits: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    return F.nll_loss(logits[mask], y[mask])


def model_loss(model: nn.Module, g: Graph) -> Tensor:
    """The model's training loss: masked MSE against one-hot labels for a
    model without log_softmax (gcn_mse), masked NLL otherwise."""
    out = model(g.x, g.edge_index)
    if getattr(model, "log_softmax", True) is False:
        return masked_mse_loss(out, g.y, g.train_mask)
    return masked_nll_loss(out, g.y, g.train_mask)


def train_step(model: nn.Module, g: Graph, opt: torch.optim.Optimizer) -> float:
    """One full-graph step in training mode; returns the loss before the update."""
    model.train()
    opt.zero_grad(set_to_none=True)
    loss = model_loss(model, g)
    loss.backward()
    opt.step()
    return loss.item()


def train_steps(model: nn.Module, g: Graph, opt: torch.optim.Optimizer, steps: int) -> List[float]:
    return [train_step(model, g, opt) for _ in range(steps)]


@torch.no_grad()
def predict(model: nn.Module, g: Graph) -> Tensor:
    """log_softmax logits in eval mode (no dropout)."""
    model.eval()
    return model(g.x, g.edge_index)
