"""VectorWorld's VAE scene encoder (ScenarioDreamerEncoder) as torch.nn
modules, written from its formulas in plain torch 1.13 (neither VectorWorld
nor PyG is a dependency). One copy, shared by bench/scene_encoder.py and
tests/reference/make_encoder_golden.py. Importing this module has no side
effects.

Layout: the modules of vectorworld/utils/layers.py and
networks/vae_net.py, so that their state_dict names are the names gnnrt
must give its parameters. make_encoder_golden.py draws its initial values
in named_modules() order: keep the registration order as it is.

Forwards: the PyG way, as VectorWorld publishes its layers: per-edge
[E, H, d] keys, values and messages gathered with index_select, PyG's
scatter softmax (gnn_reference.segment_softmax), index_add aggregation;
the lane-to-agent and lane-to-query layers run on the concatenated rows
VectorWorld passes ([lanes; agents], [lanes; queries]). The benchmark times
these; the golden data comes from make_batch_golden.py's functional
forwards over a parameter dict instead (make_encoder_golden.encode).

Sizes `s`: a dict with scripts/scene_encoder_job.py FULL's keys.
"""
import torch
from torch import nn

from gnn_reference import segment_softmax


class ResidualMLP(nn.Module):
    """vectorworld/utils/layers.py: n_hidden Linear -> LayerNorm layers (ReLU
    between them), plus the input's Linear -> LayerNorm, ReLU of the sum,
    then linear_out when `out` is given."""

    def __init__(self, inp, hidden, n_hidden=2, out=None):
        super().__init__()
        self.linears = nn.ModuleList([nn.Linear(inp if i == 0 else hidden, hidden) for i in range(n_hidden)])
        self.norms = nn.ModuleList([nn.LayerNorm(hidden) for _ in range(n_hidden)])
        self.transform_linear = nn.Linear(inp, hidden)
        self.transform_norm = nn.LayerNorm(hidden)
        self.linear_out = nn.Linear(hidden, out) if out is not None else None

    def forward(self, x):
        out = x
        for k, (lin, norm) in enumerate(zip(self.linears, self.norms)):
            out = norm(lin(out))
            if k < len(self.linears) - 1:
                out = torch.relu(out)
        out = torch.relu(out + self.transform_norm(self.transform_linear(x)))
        return self.linear_out(out) if self.linear_out is not None else out


class AttentionLayer(nn.Module):
    """QCNet's attention layer, as VectorWorld's MessagePassing computes it;
    r_width: edge features of that width (to_k_r, to_v_r, attn_prenorm_r)."""

    def __init__(self, hidden, heads, ff, bipartite, r_width=None):
        super().__init__()
        self.heads, self.d = heads, hidden // heads
        self.to_q = nn.Linear(hidden, hidden)
        self.to_k = nn.Linear(hidden, hidden, bias=False)
        self.to_v = nn.Linear(hidden, hidden)
        if r_width:
            self.to_k_r = nn.Linear(r_width, hidden, bias=False)
            self.to_v_r = nn.Linear(r_width, hidden)
        self.to_s = nn.Linear(hidden, hidden)
        self.to_g = nn.Linear(2 * hidden, hidden)
        self.to_out = nn.Linear(hidden, hidden)
        self.ff_mlp = nn.Sequential(nn.Linear(hidden, ff), nn.ReLU(inplace=True), nn.Dropout(0.0),
                                    nn.Linear(ff, hidden))
        self.attn_prenorm_x_src = nn.LayerNorm(hidden)
        # Not bipartite: one norm under two names, as VectorWorld aliases it.
        self.attn_prenorm_x_dst = nn.LayerNorm(hidden) if bipartite else self.attn_prenorm_x_src
        if r_width:
            self.attn_prenorm_r = nn.LayerNorm(r_width)
        self.attn_postnorm = nn.LayerNorm(hidden)
        self.ff_prenorm = nn.LayerNorm(hidden)
        self.ff_postnorm = nn.LayerNorm(hidden)

    def forward(self, x, r, ei):
        """x: one tensor of rows, as VectorWorld passes it (a bipartite
        layer's sources and destinations concatenated, ei indexing them)."""
        xs = xd = self.attn_prenorm_x_src(x)
        H, d = self.heads, self.d
        q, k, v = self.to_q(xd).view(-1, H, d), self.to_k(xs).view(-1, H, d), self.to_v(xs).view(-1, H, d)
        src, dst = ei
        q_i, k_j, v_j = q.index_select(0, dst), k.index_select(0, src), v.index_select(0, src)
        if r is not None:
            r = self.attn_prenorm_r(r)
            k_j = k_j + self.to_k_r(r).view(-1, H, d)
            v_j = v_j + self.to_v_r(r).view(-1, H, d)
        attn = segment_softmax((q_i * k_j).sum(-1) * d ** -0.5, dst, x.shape[0])
        agg = torch.zeros(x.shape[0], H, d).index_add_(0, dst, v_j * attn.unsqueeze(-1)).view(-1, H * d)
        g = torch.sigmoid(self.to_g(torch.cat([agg, xd], dim=-1)))
        x = x + self.attn_postnorm(self.to_out(agg + g * (self.to_s(xd) - agg)))
        return x + self.ff_postnorm(self.ff_mlp(self.ff_prenorm(x)))


class EdgeFeatureUpdate(nn.Module):
    def __init__(self, node_hidden, edge_hidden):
        super().__init__()
        self.node_mlp = ResidualMLP(2 * node_hidden, edge_hidden)
        self.edge_mlp = ResidualMLP(2 * edge_hidden, edge_hidden)

    def forward(self, x, ei, r):
        return self.edge_mlp(torch.cat([self.node_mlp(torch.cat([x[ei[1]], x[ei[0]]], -1)), r], -1))


class Block(nn.Module):
    def __init__(self, s):
        super().__init__()
        H, A = s["hidden"], s["agent_hidden"]
        self.a2a_transformer_layer = AttentionLayer(A, s["agent_heads"], s["agent_ff"], False)
        self.l2l_transformer_layer = AttentionLayer(H, s["heads"], s["ff"], False, s["conn_hidden"])
        self.l2a_transformer_layer = AttentionLayer(A, s["agent_heads"], s["agent_ff"], True)
        self.update_edge_embeddings = EdgeFeatureUpdate(A, s["conn_hidden"])
        self.downsample_lane_emb = nn.Linear(H, A)

    def forward(self, a, l, c, a2a, l2l, l2a):
        l = self.l2l_transformer_layer(l, c, l2l)
        down = self.downsample_lane_emb(l)
        a = self.l2a_transformer_layer(torch.cat([down, a]), None, l2a)[len(l):]
        a = self.a2a_transformer_layer(a, None, a2a)
        return a, l, self.update_edge_embeddings(down, l2l, c)


class Encoder(nn.Module):
    """vectorworld/networks/vae_net.py's ScenarioDreamerEncoder."""

    def __init__(self, s):
        super().__init__()
        H, A = s["hidden"], s["agent_hidden"]
        self.state, self.motion = s["state"], s["motion"]
        self.Q = nn.Parameter(torch.empty(1, H))
        nn.init.xavier_uniform_(self.Q)
        self.pred_lane_cond_dis = ResidualMLP(H, H, 2, s["max_lanes"] + 1)
        self.l2q_transformer_layer = AttentionLayer(H, s["heads"], s["ff"], True)
        self.agent_static_mlp = ResidualMLP(s["state"] + s["types"], A)
        self.agent_motion_mlp = ResidualMLP(s["motion"] + s["types"], A)
        self.agent_gate_mlp = ResidualMLP(s["state"] + s["motion"] + s["types"], A, 1, A)
        self.lane_mlp = ResidualMLP(s["lane_in"], H)
        self.lane_conn_mlp = ResidualMLP(s["conn_types"], s["conn_hidden"])
        self.encoder_transformer_blocks = nn.ModuleList([Block(s) for _ in range(s["blocks"])])
        self.agent_mu = nn.Linear(A, s["agent_latent"])
        self.lane_mu = nn.Linear(H, s["lane_latent"])
        self.agent_log_var = nn.Linear(A, s["agent_latent"])
        self.lane_log_var = nn.Linear(H, s["lane_latent"])

    def forward(self, xa, xl, xc, a2a, l2l, l2a, l2q, scenes):
        """Returns agent_mu, lane_mu, agent_log_var, lane_log_var and the
        lane-count logits. l2a's and l2q's destinations index the rows of
        [lanes; agents] and [lanes; queries] (offset by the lane count)."""
        st, mo = self.state, self.motion
        hs = self.agent_static_mlp(torch.cat([xa[:, :st], xa[:, st + mo:]], -1))
        hm = self.agent_motion_mlp(torch.cat([xa[:, st:st + mo], xa[:, st + mo:]], -1))
        g = torch.sigmoid(self.agent_gate_mlp(xa))
        a, l, c = (1 - g) * hs + g * hm, self.lane_mlp(xl), self.lane_conn_mlp(xc)
        q = self.Q.repeat(scenes, 1)
        for blk in self.encoder_transformer_blocks:
            a, l, c = blk(a, l, c, a2a, l2l, l2a)
            q = self.l2q_transformer_layer(torch.cat([l, q]), None, l2q)[len(l):]
        return (self.agent_mu(a), self.lane_mu(l), self.agent_log_var(a), self.lane_log_var(l),
                self.pred_lane_cond_dis(q))


class Model(nn.Module):
    """The job's model (scripts/scene_encoder_job.py): the encoder and its
    linear reconstruction decoders recon.agent and recon.lane."""

    def __init__(self, s):
        super().__init__()
        self.encoder = Encoder(s)
        self.recon = nn.ModuleDict({"agent": nn.Linear(s["agent_latent"], s["state"] + s["motion"] + s["types"]),
                                    "lane": nn.Linear(s["lane_latent"], s["lane_in"])})


def kl(mu, log_var):
    """The VAE's KL term: per row summed over the latent, mean over rows."""
    return (-0.5 * (1 + log_var - mu ** 2 - log_var.exp())).sum(dim=1).mean()
