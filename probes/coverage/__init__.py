"""The optimizer-coverage family (S3): the parameters an optimizer tracks, before and after a framework wraps it.
`probe` is the probe (its spec and run); `cases` the routes a case takes; `routes` how each wrapper wraps the model
and its optimizer; `subject` the four-part model (or the user's) and its group; `invariants` what the optimizer tracks
over the ranks and what a step changed; `composer` Composer's own Trainer route.
"""
