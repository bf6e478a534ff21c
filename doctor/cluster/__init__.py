"""The nodes of a run (torchrun's options, Slurm's variables) and how they meet in torchrun's rendezvous store."""
