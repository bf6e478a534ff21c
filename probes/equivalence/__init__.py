"""The equivalence family: each wrapped training route (DDP, FSDP, DeepSpeed, Accelerate, the HF Trainer) against
plain torch, step by step. `probe` is the probe (its spec and run); `cases` the routes a case takes and the known
issues they reproduce; `routes` how each wrapper trains (its session); `sessions` a route's settings and its session
opened; `subject` the model, its data and the reference's math; `invariants` the route's steps judged against the
reference's; `bounds` the tolerances; `knobs` the knob matrix (its settings, their covering design, and the groups
and learning rates the reference computes for a setting); `shrink` a diverging setting shrunk to the smallest that
still diverges; `where` where a divergence starts; `muon` the reference's Muon; `reference` the
reference's own process; `trainer` the Trainer routes and `tokens` their stream and token-mean reference; `resume`
and `child` the resume cases' new process.
"""
