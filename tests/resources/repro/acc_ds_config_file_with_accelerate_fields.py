"""Run: python tests/resources/repro/acc_ds_config_file_with_accelerate_fields.py

An accelerate config that names a DeepSpeed JSON (deepspeed_config_file) and still carries the questionnaire's
zero_stage / gradient_accumulation_steps: `accelerate launch` (one CPU process) starts the script, and the
DeepSpeed plugin refuses the duplicated fields when the script builds its Accelerator.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SCRIPT = "from accelerate import Accelerator\nAccelerator()\n"

CONFIG = """\
compute_environment: LOCAL_MACHINE
distributed_type: DEEPSPEED
deepspeed_config:
  deepspeed_config_file: {ds}
  gradient_accumulation_steps: 1
  zero_stage: 2
mixed_precision: 'no'
num_machines: 1
num_processes: 1
machine_rank: 0
main_training_function: main
use_cpu: false
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root)
        ds = folder / "ds_config.json"
        ds.write_text(
            json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}})
        )
        (folder / "accelerate.yaml").write_text(CONFIG.format(ds=ds))
        (folder / "train.py").write_text(SCRIPT)
        env = dict(os.environ, MASTER_PORT="29541")
        command = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--config_file",
            "accelerate.yaml",
            "train.py",
        ]
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=55)
        print(done.stdout + done.stderr, end="")
        sys.exit(done.returncode)


if __name__ == "__main__":
    main()
