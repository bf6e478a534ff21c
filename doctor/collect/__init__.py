"""Collectors: device maps (metadata only) and the observers that record what library internals really touch."""
