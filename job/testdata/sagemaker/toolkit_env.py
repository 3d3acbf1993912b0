#!/usr/bin/env python3
"""Golden SM_* vectors from the real sagemaker-training-toolkit.

The toolkit is not vendored. Fetch it and unpack its package once:

    git clone https://github.com/aws/sagemaker-training-toolkit tk
    git -C tk checkout 33839372faf8017edb7dafc6290c1ef63557b404   # the commit the vectors came from
    python3 job/testdata/sagemaker/toolkit_env.py tk/src job/testdata/sagemaker/*/

Each case directory holds what mlfsd writes for one job (written by
`go test ./job -run TestSageMakerToolkitVectors -update`):

    case.json                 root, job name and the host facts used
    config/hyperparameters.json, config/resourceconfig.json, config/inputdataconfig.json

and receives toolkit-env.json: the [name, value] pairs of
sagemaker_training.environment.Environment().to_env_vars(), in its order,
computed by the toolkit's own code from those files. Only what cannot run
here is replaced, each on purpose:

  - boto3 (not in Debian's Python): a stub whose session has no region;
    it only feeds SAGEMAKER_REGION, which is not an SM_* variable.
  - os.makedirs while the module is imported: it would create <root>/code.
  - the config file paths point at the case's files.
  - model_dir and code_dir: the PAI layout's <root>/output/model and
    <root>/usercode instead of <root>/model and <root>/code (the one
    deliberate layout difference, see JOB-ENVIRONMENT.md).
  - num_gpus, num_cpus, num_neurons, validate_smddprun, validate_smddpmprun:
    the host facts of case.json, so the vectors do not depend on this machine.

Run with Debian's python3 (python3-six is the only other import).
"""
import json
import os
import subprocess
import sys
import types


def child(src, case_dir):
    with open(os.path.join(case_dir, "case.json")) as f:
        case = json.load(f)
    root, host = case["root"], case["host"]
    for name in ("SAGEMAKER_PROGRAM", "SAGEMAKER_TRAINING_MODULE", "SM_HP_MP_PARAMETERS",
                 "SAGEMAKER_SUBMIT_DIRECTORY", "SAGEMAKER_CONTAINER_LOG_LEVEL"):
        os.environ.pop(name, None)
    os.environ["SAGEMAKER_BASE_DIR"] = root
    # SageMaker sets TRAINING_JOB_NAME in the container; mlfsd sets it too.
    os.environ["TRAINING_JOB_NAME"] = case["job_name"]

    boto3 = types.ModuleType("boto3")
    boto3.session = types.SimpleNamespace(
        Session=lambda: types.SimpleNamespace(region_name=None))
    sys.modules["boto3"] = boto3
    sys.path.insert(0, src)
    makedirs = os.makedirs
    os.makedirs = lambda *a, **k: None
    try:
        from sagemaker_training import environment
    finally:
        os.makedirs = makedirs

    config = os.path.join(case_dir, "config")
    environment.hyperparameters_file_dir = os.path.join(config, "hyperparameters.json")
    environment.resource_config_file_dir = os.path.join(config, "resourceconfig.json")
    environment.input_data_config_file_dir = os.path.join(config, "inputdataconfig.json")
    environment.model_dir = os.path.join(root, "output", "model")
    environment.code_dir = os.path.join(root, "usercode")
    environment.num_gpus = lambda: host["num_gpus"]
    environment.num_cpus = lambda: host["num_cpus"]
    environment.num_neurons = lambda instance_type: host["num_neurons"]
    environment.validate_smddprun = lambda: host["smddprun"]
    environment.validate_smddpmprun = lambda: host["smddpmprun"]

    env = environment.Environment().to_env_vars()
    with open(os.path.join(case_dir, "toolkit-env.json"), "w") as f:
        json.dump(list(env.items()), f, indent=1)
        f.write("\n")


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) < 3:
        sys.exit("usage: toolkit_env.py TOOLKIT_SRC CASE_DIR...")
    src = os.path.abspath(sys.argv[1])
    for case_dir in sys.argv[2:]:
        # One process per case: the toolkit computes its paths at import.
        subprocess.run([sys.executable, os.path.abspath(__file__), "--child", src,
                        os.path.abspath(case_dir)], check=True)
        print("wrote", os.path.join(case_dir, "toolkit-env.json"))


if __name__ == "__main__":
    main()
