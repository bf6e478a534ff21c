"""What is known upstream: the known-issue data per library, the classifier, and triage of a user's own logs."""
