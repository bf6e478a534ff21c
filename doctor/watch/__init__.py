"""Checks inside a user's own training job (`ds_doctor.api.watch`, `DoctorCallback`): the moments S0-S4 bite."""
