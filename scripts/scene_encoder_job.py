#!/usr/bin/python3
"""Writes the gnnrt job of VectorWorld's VAE scene encoder
(ScenarioDreamerEncoder, docs/scene-models.md) at any sizes, with its
state_dict names under "encoder.", small linear decoders ("recon.") from the
reparameterised latents back to the agent and lane features, and the
training objective: MSE of both reconstructions, 1e-2 x the KL terms and
0.08 x the cross-entropy of the lane-count head (vae.yaml's kl_weight and
cond_dis_weight).

  /usr/bin/python3 scripts/scene_encoder_job.py > examples/scene_encoder.pbtxt

writes the example at vae.yaml's sizes with the Waymo dataset's widths
(45.11 M parameters, 424 encoder keys). tests/reference/make_encoder_golden.py
imports encoder_job() for the reduced widths of its golden case.
Standard library only (CI runs without torch).
"""
import argparse
import sys

# vae.yaml (hidden 768, 8 heads, dim_f 2048; agents 384, 8 heads, 1024;
# lane connections 96; 3 blocks; latents 24 and 18) and waymo_base.yaml's
# widths (7 state + 12 motion + 3 types; 20 points x 2; 6 connection
# types; 100 lanes + 1 outputs of the lane-count head).
FULL = dict(hidden=768, heads=8, ff=2048, agent_hidden=384, agent_heads=8, agent_ff=1024, conn_hidden=96,
            blocks=3, lane_latent=24, agent_latent=18, state=7, motion=12, types=3, lane_in=40, conn_types=6,
            max_lanes=100)


def encoder_modules(s):
    """The encoder's modules, job text; outputs encoder.agent_mu,
    encoder.lane_mu, their log variances and the per-scene lane-count logits
    `lane_count_logits`."""
    out = []

    def m(name, inputs, body, params=None):
        ins = "".join(f' input: "{i}"' for i in inputs)
        scope = f' params: "{params}"' if params else ""
        out.append(f'  module {{ name: "{name}"{ins}{scope} {body} }}')

    H, A, C = s["hidden"], s["agent_hidden"], s["conn_hidden"]
    lane_attention = f'edges: "{{}}" heads: {s["heads"]} feedforward: {s["ff"]}'
    agent_attention = f'edges: "{{}}" heads: {s["agent_heads"]} feedforward: {s["agent_ff"]}'
    st, mo, ty = s["state"], s["motion"], s["types"]
    # Agents: x = [state, motion, type]; a static and a motion branch mixed
    # by a gate computed from the whole row: (1 - g) static + g motion.
    m("agent_in.states", ["agent.x"], f"slice {{ begin: 0 width: {st} }}")
    m("agent_in.motion", ["agent.x"], f"slice {{ begin: {st} width: {mo} }}")
    m("agent_in.types", ["agent.x"], f"slice {{ begin: {st + mo} width: {ty} }}")
    m("agent_in.static", ["agent_in.states", "agent_in.types"], "concat {}")
    m("agent_in.moving", ["agent_in.motion", "agent_in.types"], "concat {}")
    m("encoder.agent_static_mlp", ["agent_in.static"], f"residual_mlp {{ hidden: {A} }}")
    m("encoder.agent_motion_mlp", ["agent_in.moving"], f"residual_mlp {{ hidden: {A} }}")
    m("encoder.agent_gate_mlp", ["agent.x"], f"residual_mlp {{ hidden: {A} hidden_layers: 1 out: {A} }}")
    m("agent_in.gate", ["encoder.agent_gate_mlp"], "activation { kind: SIGMOID }")
    m("agent_in.keep", ["agent_in.gate"], "scale { alpha: -1 beta: 1 }")
    m("agent_in.kept", ["agent_in.keep", "encoder.agent_static_mlp"], "mul {}")
    m("agent_in.moved", ["agent_in.gate", "encoder.agent_motion_mlp"], "mul {}")
    m("agent_in.embedding", ["agent_in.kept", "agent_in.moved"], "add {}")
    m("encoder.lane_mlp", ["lane.x"], f"residual_mlp {{ hidden: {H} }}")
    m("encoder.lane_conn_mlp", ["l2l.x"], f"residual_mlp {{ hidden: {C} }}")
    m("encoder.Q", [], f'token {{ node_set: "query" width: {H} }}')
    agents, lanes, conns, query = "agent_in.embedding", "encoder.lane_mlp", "encoder.lane_conn_mlp", "encoder.Q"
    for b in range(s["blocks"]):
        p = f"encoder.encoder_transformer_blocks.{b}"
        m(f"{p}.l2l_transformer_layer", [lanes, conns], f"attention {{ {lane_attention.format('l2l')} }}")
        lanes = f"{p}.l2l_transformer_layer"
        m(f"{p}.downsample_lane_emb", [lanes], f"linear {{ out: {A} xavier: true }}")
        down = f"{p}.downsample_lane_emb"
        # VectorWorld passes [lanes; agents] as one tensor: one pre-norm.
        m(f"{p}.l2a_transformer_layer", [down, agents],
          f"attention {{ {agent_attention.format('l2a')} shared_prenorm: true }}")
        m(f"{p}.a2a_transformer_layer", [f"{p}.l2a_transformer_layer"],
          f"attention {{ {agent_attention.format('a2a')} }}")
        agents = f"{p}.a2a_transformer_layer"
        # EdgeFeatureUpdate over the downsampled lanes: [x_i, x_j] per edge
        # (destination, source), a ResidualMLP, then one over [that, r].
        u = f"{p}.update_edge_embeddings"
        m(f"{u}.x_i", [down], 'gather { edges: "l2l" destination: true }')
        m(f"{u}.x_j", [down], 'gather { edges: "l2l" }')
        m(f"{u}.ends", [f"{u}.x_i", f"{u}.x_j"], "concat {}")
        m(f"{u}.node_mlp", [f"{u}.ends"], f"residual_mlp {{ hidden: {C} }}")
        m(f"{u}.combined", [f"{u}.node_mlp", conns], "concat {}")
        m(f"{u}.edge_mlp", [f"{u}.combined"], f"residual_mlp {{ hidden: {C} }}")
        conns = f"{u}.edge_mlp"
        # The lane-to-query layer: one set of parameters for every block.
        m(f"encoder.l2q.{b}", [lanes, query], f"attention {{ {lane_attention.format('l2q')} shared_prenorm: true }}",
          params="encoder.l2q_transformer_layer")
        query = f"encoder.l2q.{b}"
    m("encoder.pred_lane_cond_dis", [query],
      f"residual_mlp {{ hidden: {H} hidden_layers: 2 out: {s['max_lanes'] + 1} }}")
    m("lane_count_logits", ["encoder.pred_lane_cond_dis"], 'pool { reduce: SUM }')  # one query row a scene
    m("encoder.agent_mu", [agents], f"linear {{ out: {s['agent_latent']} xavier: true }}")
    m("encoder.lane_mu", [lanes], f"linear {{ out: {s['lane_latent']} xavier: true }}")
    m("encoder.agent_log_var", [agents], f"linear {{ out: {s['agent_latent']} xavier: true }}")
    m("encoder.lane_log_var", [lanes], f"linear {{ out: {s['lane_latent']} xavier: true }}")
    return out


def objective(s):
    """The reconstruction decoders and the loss terms, job text."""
    out = [
        '  module { name: "agent_z" input: "encoder.agent_mu" input: "encoder.agent_log_var" reparameterize {} }',
        '  module { name: "lane_z" input: "encoder.lane_mu" input: "encoder.lane_log_var" reparameterize {} }',
        f'  module {{ name: "recon.agent" input: "agent_z" linear {{ out: {s["state"] + s["motion"] + s["types"]} }} }}',
        f'  module {{ name: "recon.lane" input: "lane_z" linear {{ out: {s["lane_in"]} }} }}',
        '  loss_term { input: "recon.agent" target: "agent.y" kind: MSE }',
        '  loss_term { input: "recon.lane" target: "lane.y" kind: MSE }',
        '  loss_term { input: "encoder.agent_mu" log_var: "encoder.agent_log_var" kind: KL weight: 0.01 }',
        '  loss_term { input: "encoder.lane_mu" log_var: "encoder.lane_log_var" kind: KL weight: 0.01 }',
        '  loss_term { input: "lane_count_logits" target: "graph.y" kind: CROSS_ENTROPY weight: 0.08 }',
    ]
    # What `gnnrt infer` writes: the latents' means and log variances and
    # the lane-count logits, per agent, lane and scene.
    out += [f'  output: "{n}"' for n in ("encoder.agent_mu", "encoder.lane_mu", "encoder.agent_log_var",
                                          "encoder.lane_log_var", "lane_count_logits")]
    return out


def encoder_job(s, name, dataset, epochs, batch_size, lr, extra=""):
    """The whole job text."""
    modules = "\n".join(encoder_modules(s) + objective(s))
    return f"""# VectorWorld's VAE scene encoder (docs/scene-models.md), written by
# scripts/scene_encoder_job.py: hidden {s['hidden']} ({s['heads']} heads, feed-forward {s['ff']}), agents {s['agent_hidden']}
# ({s['agent_heads']} heads, {s['agent_ff']}), lane connections {s['conn_hidden']}, {s['blocks']} blocks, latents {s['lane_latent']} (lanes)
# and {s['agent_latent']} (agents). Parameters under "encoder." carry VectorWorld's
# state_dict names; "recon." are this job's linear decoders.
name: "{name}"
dataset {{ path: "{dataset}" }}
model {{
{modules}
}}
optimizer {{ kind: ADAM lr: {lr} weight_decay: 0 }}
schedule {{ epochs: {epochs} }}
batching {{ batch_size: {batch_size}{extra} }}
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="scenes:scenes=16,min_lanes=10,max_lanes=100,max_agents=30")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-4)
    args = parser.parse_args()
    sys.stdout.write(encoder_job(FULL, "scene_encoder", args.dataset, args.epochs, args.batch_size, args.lr))


if __name__ == "__main__":
    main()
