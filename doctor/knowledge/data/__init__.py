"""The known-issue catalog as data: one TOML file per library, read and checked by `ds_doctor.knowledge.load`."""
