"""The optimizer-coverage family (S3): the parameters an optimizer tracks, before and after a framework wraps it.
`probe` is the probe; `subject` the model and its group, `composer` Composer's own Trainer route.
"""
