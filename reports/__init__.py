"""Reports: the plain-data report model, its JSON schema, and renderers that only read it."""
