"""Many nodes' runs side by side: what `fleet` compares of each (`facts`), what drifts across nights (`drift`)."""
