"""Run: python tests/resources/repro/acc_notebook_launcher_state_initialized.py

A notebook cell built an Accelerator before the cell that calls notebook_launcher for two processes (on the CPU the
multi-process branch is taken as on a multi-GPU box): the launcher refuses to fork with that state alive.
"""

from accelerate import Accelerator, notebook_launcher


def training_function() -> None:
    accelerator = Accelerator()
    accelerator.print("training")


def main() -> None:
    Accelerator()  # the earlier cell
    notebook_launcher(training_function, num_processes=2)


if __name__ == "__main__":
    main()
