"""The equivalence family: each wrapped training route (DDP, FSDP, DeepSpeed, Accelerate, the HF Trainer) against
plain torch, step by step. `probe` is the probe; `routes` what each route is, `sessions` how it trains, `subject`
the model, `bounds` the tolerances, `trainer` the Trainer routes, `resume` and `child` the resume cases' new process.
"""
