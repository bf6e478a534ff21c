# Sourced by the GPU scripts: ds-doctor importable as `ds_doctor` from this checkout without installing it (the GPU
# image has no pip index for it). setup.cfg maps doctor/, probes/ and reports/ onto the one name; this does the same
# with links in /tmp/dsd, which goes on PYTHONPATH before the checkout (the checkout itself for tests.resources).
rm -rf /tmp/dsd && mkdir -p /tmp/dsd/ds_doctor
for entry in "$PWD"/doctor/*; do ln -s "$entry" /tmp/dsd/ds_doctor/; done
ln -s "$PWD/probes" /tmp/dsd/ds_doctor/probes
ln -s "$PWD/reports" /tmp/dsd/ds_doctor/reports
